-- Inserts into the outbox table only: updates and deletes (clean-up jobs) are never decoded as events.
DO {{.Dollar}}
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = {{.PublicationLiteral}}) THEN
        CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert');
    END IF;
END
{{.Dollar}};
