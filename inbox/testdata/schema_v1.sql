-- The inbox tables of a cdc-router consumer. {schema} is replaced by the consumer's schema name (quoted).
-- Every statement is idempotent, and the advisory lock makes concurrent migrations wait for each other
-- instead of racing on CREATE ... IF NOT EXISTS.
SELECT pg_advisory_xact_lock(hashtext('cdc_router_inbox_migrate'));

CREATE SCHEMA IF NOT EXISTS {schema};

-- One row per event id ever received, with the fingerprint of its content. status says what became of
-- it: applied (the handler ran), stale (at or below the applied or baseline version: no effect), parked
-- (waiting in parked for a gap to close; becomes applied or stale in the transaction that closes it).
CREATE TABLE IF NOT EXISTS {schema}.inbox (
    event_id          text        PRIMARY KEY,
    fingerprint       bytea       NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    status            text        NOT NULL CHECK (status IN ('applied', 'stale', 'parked')),
    received_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS inbox_received_at_idx ON {schema}.inbox (received_at);

-- Per aggregate: the last version applied to the projection, and the version of the last trusted full
-- snapshot (baseline). Everything at or below applied_version is in the projection.
CREATE TABLE IF NOT EXISTS {schema}.aggregate (
    aggregate_type   text        NOT NULL,
    aggregate_id     text        NOT NULL,
    applied_version  bigint      NOT NULL DEFAULT 0,
    baseline_version bigint      NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (aggregate_type, aggregate_id),
    CHECK (baseline_version <= applied_version)
);

-- Events that arrived ahead of a gap, kept whole so they can be applied when the gap closes.
CREATE TABLE IF NOT EXISTS {schema}.parked (
    event_id          text        PRIMARY KEY,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    event_type        text        NOT NULL,
    schema_version    integer     NOT NULL,
    commit_lsn        pg_lsn,
    backfill          boolean     NOT NULL,
    payload           bytea       NOT NULL,
    headers           jsonb       NOT NULL,
    parked_at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS parked_aggregate_idx
    ON {schema}.parked (aggregate_type, aggregate_id, aggregate_version);

-- Events that can never apply: reason 'conflict' (same id, different content: both fingerprints kept),
-- 'permanent' (the handler said redelivery cannot fix it) or 'malformed' (the message could not be read).
-- The original content is kept for repair; it is never logged.
CREATE TABLE IF NOT EXISTS {schema}.failed (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id             text,
    reason               text        NOT NULL CHECK (reason IN ('conflict', 'permanent', 'malformed')),
    detail               text        NOT NULL,
    aggregate_type       text,
    aggregate_id         text,
    aggregate_version    bigint,
    event_type           text,
    schema_version       integer,
    stored_fingerprint   bytea,
    received_fingerprint bytea,
    payload              bytea,
    headers              jsonb,
    attempts             integer     NOT NULL DEFAULT 1,
    first_failed_at      timestamptz NOT NULL DEFAULT now(),
    last_failed_at       timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX IF NOT EXISTS failed_event_idx
    ON {schema}.failed (event_id, reason, received_fingerprint);
