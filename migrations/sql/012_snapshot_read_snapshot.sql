-- The initial snapshot's own snapshot (snapshot-resume-deleted, issue 21): pg_current_snapshot() read inside
-- the slot's exported snapshot, recorded with the job, so that a copy resumed in a new snapshot after a
-- crash leaves out the rows committed after the slot's consistent point (the stream delivers those) instead
-- of publishing them before an event of their aggregate that only the stream has. NULL for a backfill and
-- for a job recorded before this migration. Added only when it is missing, so running `migrate` again does
-- not need to own the table.
DO {{.Dollar}}
DECLARE
    s regclass := format('%I.snapshots', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = s AND attname = 'read_snapshot' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS read_snapshot text', s);
    END IF;
END
{{.Dollar}};
