-- The router's own tables live in a schema of their own.
CREATE SCHEMA IF NOT EXISTS {{.Schema}};

-- The acknowledged position of each slot: where `run` starts after a restart. system_id pins it to one
-- cluster, so a position copied from another server is refused instead of silently skipping events.
CREATE TABLE IF NOT EXISTS {{.Schema}}.positions (
    slot       text PRIMARY KEY,
    system_id  text NOT NULL,
    timeline   integer NOT NULL,
    lsn        pg_lsn NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- Outbox rows that could not become events, and events the broker refused, with their bounded raw values,
-- position and reason; written only by package quarantine. 005 adds event_id and value_notes and lets
-- row_values be NULL (a minimal record).
CREATE TABLE IF NOT EXISTS {{.Schema}}.quarantine (
    id             bigserial PRIMARY KEY,
    slot           text NOT NULL,
    lsn            pg_lsn NOT NULL,
    row_key        text NOT NULL DEFAULT '',  -- streamed rows: '' or '#<ordinal>' among the inserts at lsn;
                                              -- snapshot and backfill rows: the JSON key [type, id, version]
    commit_lsn     pg_lsn,
    table_name     text NOT NULL,
    reason         text NOT NULL,
    row_values     jsonb NOT NULL,
    quarantined_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (slot, lsn, row_key)
);
