-- Operator tools (`cdc-router jobs`, `cdc-router quarantine`): a snapshot or backfill that stopped on an
-- error is recorded with state 'failed' and the error (state is running, done or failed); a quarantine
-- record that an operator replayed or discarded keeps its row (the audit trail) and says when and how it
-- was handled (handled_how is replayed or discarded). Each column is added only when it is missing, so
-- running `migrate` again does not need to own the tables.
DO {{.Dollar}}
DECLARE
    s regclass := format('%I.snapshots', {{.SchemaLiteral}})::regclass;
    q regclass := format('%I.quarantine', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = s AND attname = 'error' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS error text', s);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = q AND attname = 'handled_at' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS handled_at timestamptz', q);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = q AND attname = 'handled_how' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS handled_how text', q);
    END IF;
END
{{.Dollar}};
