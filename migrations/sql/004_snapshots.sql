-- Progress of each snapshot (the initial one of a slot) and backfill, so a crashed one resumes from the
-- last key whose rows were all confirmed instead of starting over.
CREATE TABLE IF NOT EXISTS {{.Schema}}.snapshots (
    name        text PRIMARY KEY,            -- initial:<slot> or backfill:<name>
    kind        text NOT NULL,               -- initial or backfill
    predicate   text NOT NULL DEFAULT '',    -- the --snapshot-where / --where predicate
    read_lsn    pg_lsn NOT NULL,             -- consistent point of the slot, or the WAL position a backfill began at
    last_key    jsonb,                       -- [aggregate_type, aggregate_id, aggregate_version] of the last confirmed row
    rows_done   bigint NOT NULL DEFAULT 0,
    rows_total  bigint NOT NULL DEFAULT 0,
    state       text NOT NULL,               -- running or done
    started_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz
);
