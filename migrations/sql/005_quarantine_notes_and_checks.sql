-- Quarantine records that cannot fail to be written (package quarantine): event_id is the outbox id when the
-- row has one; value_notes says, per column, which stored values were cut to their prefix or were not valid
-- UTF-8 (with the whole value's length and SHA-256); row_values is NULL in a minimal record, written when
-- PostgreSQL refused the values themselves (value_notes then holds its message). Each change is made only
-- when it is missing, so running `migrate` again does not need to own the table.
DO {{.Dollar}}
DECLARE
    q regclass := format('%I.quarantine', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = q AND attname = 'event_id' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS event_id text', q);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = q AND attname = 'value_notes' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS value_notes jsonb', q);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = q AND attname = 'row_values' AND attnotnull) THEN
        EXECUTE format('ALTER TABLE %s ALTER COLUMN row_values DROP NOT NULL', q);
    END IF;
END
{{.Dollar}};

-- What the router last saw of its publication while streaming, per slot: ok_at is when a check last found
-- the outbox table in the publication, publishing inserts; failed_at is when a check first found it missing
-- (since the last success) and problem what that check found. The refusal at the next start names the rows
-- inserted from ok_at on, to backfill.
CREATE TABLE IF NOT EXISTS {{.Schema}}.publication_checks (
    slot      text PRIMARY KEY,
    ok_at     timestamptz,
    failed_at timestamptz,
    problem   text
);
