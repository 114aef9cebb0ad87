-- Inserts into the outbox table only: updates and deletes (clean-up jobs) are never decoded as events.
-- A partitioned outbox is published through its root (publish_via_partition_root), so that an insert into
-- any partition arrives under the outbox table's name, and attaching or dropping partitions changes nothing.
DO {{.Dollar}}
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = {{.PublicationLiteral}}) THEN
        IF (SELECT relkind FROM pg_class WHERE oid = to_regclass({{.TableLiteral}})) = 'p' THEN
            CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert', publish_via_partition_root = true);
        ELSE
            CREATE PUBLICATION {{.Publication}} FOR TABLE {{.Table}} WITH (publish = 'insert');
        END IF;
    END IF;
END
{{.Dollar}};
