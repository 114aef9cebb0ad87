-- The oldest transaction still running when the recorded sound publication check ran
-- (pg_snapshot_xmin(pg_current_snapshot()), read before the check read the membership identities). A
-- publication gap found after a restart is bounded by it: every transaction that inserted into the outbox
-- while it was out of the publication was running after that check, so its xid is at least this one, and a
-- gap's backfill selects the rows by their inserting transaction (xmin) rather than by occurred_at, which is
-- the transaction's start and misses a long transaction's rows (seed 8126 of the harness). NULL for a check
-- recorded before this migration. Added only when it is missing, so running `migrate` again does not need
-- to own the table.
DO {{.Dollar}}
DECLARE
    c regclass := format('%I.publication_checks', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c AND attname = 'ok_xmin' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS ok_xmin xid8', c);
    END IF;
END
{{.Dollar}};
