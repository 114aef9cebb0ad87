-- The stream's safety net lives with the slot (issue 36, seed 9711): a slot's stored position also records the
-- WAL position up to which events are published one at a time after a per-message refusal (refusal_until),
-- and the event the broker refused while it was the only message in flight (named by its commit LSN, the WAL
-- start of its insert, its ordinal there and its outbox id) with how often in a row (refusal_strikes), when
-- the first and the last of those refusals were recorded, the broker's last words and whether the broker's
-- state may end them. So a router that restarts, and the other router of its slot when it takes over, go on
-- counting where the last run stopped, and an event that every run refuses is quarantined even when the
-- slot's two processes take turns. The event's columns are NULL when no event has strikes.
DO {{.Dollar}}
DECLARE
    p regclass := format('%I.positions', {{.SchemaLiteral}})::regclass;
BEGIN
    IF (SELECT count(*) FROM pg_attribute WHERE attrelid = p AND NOT attisdropped AND attname IN ('refusal_until',
            'refusal_commit_lsn', 'refusal_lsn', 'refusal_ordinal', 'refusal_event_id', 'refusal_strikes', 'refusal_first',
            'refusal_last', 'refusal_reason', 'refusal_settles')) < 10 THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS refusal_until pg_lsn, '
            'ADD COLUMN IF NOT EXISTS refusal_commit_lsn pg_lsn, ADD COLUMN IF NOT EXISTS refusal_lsn pg_lsn, '
            'ADD COLUMN IF NOT EXISTS refusal_ordinal integer, ADD COLUMN IF NOT EXISTS refusal_event_id text, '
            'ADD COLUMN IF NOT EXISTS refusal_strikes integer, ADD COLUMN IF NOT EXISTS refusal_first timestamptz, '
            'ADD COLUMN IF NOT EXISTS refusal_last timestamptz, ADD COLUMN IF NOT EXISTS refusal_reason text, '
            'ADD COLUMN IF NOT EXISTS refusal_settles boolean', p);
    END IF;
END
{{.Dollar}};
