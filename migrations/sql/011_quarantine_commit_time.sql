-- The commit time of a quarantined row's transaction (package quarantine), so that a replay stamps the
-- event with it where the stream would (a mapped table without a timestamp column), not with the time of
-- the replay or of the quarantine. NULL in the records of earlier versions, of snapshot and backfill rows
-- (their commit time is not known) and of non-transactional messages. Added only when it is missing, so
-- running `migrate` again does not need to own the table.
DO {{.Dollar}}
DECLARE
    q regclass := format('%I.quarantine', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = q AND attname = 'commit_time' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS commit_time timestamptz', q);
    END IF;
END
{{.Dollar}};
