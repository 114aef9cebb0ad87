-- PostgreSQL 18 publishes stored generated columns when the publication says so; before 18 pgoutput never
-- sends them (the start-up check refuses an outbox column the router reads that is generated there). When
-- the outbox has a stored generated column, its publication is set to publish them, so that a mapping may
-- read a value the database computes (a key taken out of a JSON column). Nothing changes for an outbox
-- without one, nor before 18. Virtual generated columns (18) are never published.
DO {{.Dollar}}
BEGIN
    IF current_setting('server_version_num')::int >= 180000
       AND EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass({{.TableLiteral}})
                   AND attnum > 0 AND NOT attisdropped AND attgenerated = 's') THEN
        -- pubgencols exists from 18 on only: read it where this branch runs.
        IF EXISTS (SELECT 1 FROM pg_publication WHERE pubname = {{.PublicationLiteral}} AND pubgencols::text <> 's') THEN
            EXECUTE format('ALTER PUBLICATION %I SET (publish_generated_columns = stored)', {{.PublicationLiteral}});
        END IF;
    END IF;
END
{{.Dollar}};
