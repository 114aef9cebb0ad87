-- Progress inside a transaction (issue 19, finding 8): the stored position of a slot also records how many
-- items of the oldest transaction not yet acknowledged were confirmed, in stream order, so that a replay of
-- that transaction after a restart does not publish them again. The transaction is named by its commit LSN
-- and xid; mark_config is a fingerprint of the decoding configuration it was counted under (a mark under
-- another one is ignored). All four are NULL when there is no such progress. Each column is added only
-- when it is missing, so running `migrate` again does not need to own the table.
DO {{.Dollar}}
DECLARE
    p regclass := format('%I.positions', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = p AND attname = 'mark_config' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS mark_commit_lsn pg_lsn, '
            'ADD COLUMN IF NOT EXISTS mark_xid bigint, ADD COLUMN IF NOT EXISTS mark_done bigint, '
            'ADD COLUMN IF NOT EXISTS mark_config text', p);
    END IF;
END
{{.Dollar}};
