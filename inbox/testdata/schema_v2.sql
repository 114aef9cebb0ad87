-- The inbox schema as released before the requests table remembered expiry, cancellation and premises
-- and before the skipped table (issue 35); kept to test the in-place upgrade.
-- The inbox tables of cdc-router consumers. {schema} is replaced by the schema name (quoted) and
-- {schema_literal} by that quoted name as a string literal. Every record belongs to one consumer (the
-- name in Config.Consumer), so projections sharing a schema never see each other's events.
-- Every statement is idempotent, and the advisory lock makes concurrent migrations wait for each other
-- instead of racing on CREATE ... IF NOT EXISTS.
SELECT pg_advisory_xact_lock(hashtext('cdc_router_inbox_migrate'));

CREATE SCHEMA IF NOT EXISTS {schema};

-- One row per consumer and event id ever received, with the fingerprint of its content. status says
-- what became of it: applied (the handler ran), stale (at or below the applied or baseline version: no
-- effect), parked (waiting in parked for a gap to close; becomes applied or stale in the transaction
-- that closes it), skipped (a failed event an operator resolved without applying it: ResolveFailed).
CREATE TABLE IF NOT EXISTS {schema}.inbox (
    consumer          text        NOT NULL,
    event_id          text        NOT NULL,
    fingerprint       bytea       NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    status            text        NOT NULL
        CONSTRAINT inbox_status_check CHECK (status IN ('applied', 'stale', 'parked', 'skipped')),
    received_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Per consumer and aggregate: the last version applied to the projection, and the version of the last
-- trusted full snapshot (baseline). Everything at or below applied_version is in the projection.
CREATE TABLE IF NOT EXISTS {schema}.aggregate (
    consumer         text        NOT NULL,
    aggregate_type   text        NOT NULL,
    aggregate_id     text        NOT NULL,
    applied_version  bigint      NOT NULL DEFAULT 0,
    baseline_version bigint      NOT NULL DEFAULT 0,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, aggregate_type, aggregate_id),
    CHECK (baseline_version <= applied_version)
);

-- Events that arrived ahead of a gap, kept whole so they can be applied when the gap closes.
CREATE TABLE IF NOT EXISTS {schema}.parked (
    consumer          text        NOT NULL,
    event_id          text        NOT NULL,
    aggregate_type    text        NOT NULL,
    aggregate_id      text        NOT NULL,
    aggregate_version bigint      NOT NULL,
    event_type        text        NOT NULL,
    schema_version    integer     NOT NULL,
    commit_lsn        pg_lsn,
    backfill          boolean     NOT NULL,
    payload           bytea       NOT NULL,
    headers           jsonb       NOT NULL,
    parked_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Events that did not apply: reason 'conflict' (same id, different content: both fingerprints kept),
-- 'permanent' (the handler said redelivery cannot fix it), 'malformed' (the message could not be read)
-- or 'exhausted' (it failed Config.MaxAttempts times). The original content is kept for RetryFailed and
-- repair; it is never logged. resolved_at is set once RetryFailed applied it ('retried') or
-- ResolveFailed marked it handled ('resolved').
CREATE TABLE IF NOT EXISTS {schema}.failed (
    id                   bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer             text        NOT NULL,
    event_id             text,
    reason               text        NOT NULL CONSTRAINT failed_reason_check
        CHECK (reason IN ('conflict', 'permanent', 'malformed', 'exhausted')),
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

-- Failed attempts of events not yet applied, per consumer and event id (Config.MaxAttempts). A row is
-- removed when the event is processed or moved to failed.
CREATE TABLE IF NOT EXISTS {schema}.attempts (
    consumer        text        NOT NULL,
    event_id        text        NOT NULL,
    attempts        integer     NOT NULL,
    last_error      text        NOT NULL,
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    last_failed_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- Repair requests an operator makes without the handler (`cdc-router inbox retry|resolve`): a running
-- Runner of the consumer takes each once (taken_at), carries it out with RetryFailed, ResolveFailed,
-- RetryParked or ResolveParked, and writes the outcome, or the error, with done_at.
CREATE TABLE IF NOT EXISTS {schema}.requests (
    id           bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer     text        NOT NULL,
    action       text        NOT NULL CHECK (action IN ('retry', 'resolve')),
    kind         text        NOT NULL CHECK (kind IN ('failed', 'parked')),
    target       text        NOT NULL,
    note         text        NOT NULL DEFAULT '',
    requested_at timestamptz NOT NULL DEFAULT now(),
    taken_at     timestamptz,
    done_at      timestamptz,
    outcome      text,
    error        text
);

-- Upgrades in place and indexes. Each step runs only when the catalog says it is missing, so migrating
-- an up-to-date schema takes no table lock: it runs at every consumer start, and a lock request queued
-- behind a stalled consumer's transaction would block every other consumer. Rows that existed before
-- consumer names belong to consumer '' until AdoptRecords gives them to one.
DO $migrate$
DECLARE
    s    CONSTANT text := {schema_literal};
    r    record;
    name text;
    def  text;
BEGIN
    FOR r IN SELECT * FROM (VALUES
        ('inbox', 'consumer', $$text NOT NULL DEFAULT ''$$),
        ('aggregate', 'consumer', $$text NOT NULL DEFAULT ''$$),
        ('parked', 'consumer', $$text NOT NULL DEFAULT ''$$),
        ('failed', 'consumer', $$text NOT NULL DEFAULT ''$$),
        ('failed', 'commit_lsn', 'pg_lsn'),
        ('failed', 'backfill', 'boolean'),
        ('failed', 'full_state', 'boolean NOT NULL DEFAULT false'),
        ('failed', 'resolved_at', 'timestamptz'),
        ('failed', 'resolution', $$text CHECK (resolution IN ('retried', 'resolved'))$$),
        ('failed', 'note', 'text')) AS v(tbl, col, typ)
    LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = (s || '.' || r.tbl)::regclass
                       AND attname = r.col AND NOT attisdropped) THEN
            EXECUTE format('ALTER TABLE %s.%I ADD COLUMN %I %s', s, r.tbl, r.col, r.typ);
            IF r.col = 'consumer' THEN -- existing rows keep ''; new ones must name their consumer
                EXECUTE format('ALTER TABLE %s.%I ALTER COLUMN consumer DROP DEFAULT', s, r.tbl);
            END IF;
        END IF;
    END LOOP;

    FOR r IN SELECT * FROM (VALUES
        ('inbox', 'consumer, event_id'),
        ('aggregate', 'consumer, aggregate_type, aggregate_id'),
        ('parked', 'consumer, event_id')) AS v(tbl, cols)
    LOOP
        name := NULL;
        def := NULL;
        SELECT conname, pg_get_constraintdef(oid) INTO name, def FROM pg_constraint
        WHERE conrelid = (s || '.' || r.tbl)::regclass AND contype = 'p';
        IF def IS DISTINCT FROM 'PRIMARY KEY (' || r.cols || ')' THEN
            IF name IS NOT NULL THEN
                EXECUTE format('ALTER TABLE %s.%I DROP CONSTRAINT %I', s, r.tbl, name);
            END IF;
            EXECUTE format('ALTER TABLE %s.%I ADD PRIMARY KEY (%s)', s, r.tbl, r.cols);
        END IF;
    END LOOP;

    FOR r IN SELECT * FROM (VALUES
        ('inbox', 'inbox_status_check', 'skipped',
         $$CHECK (status IN ('applied', 'stale', 'parked', 'skipped'))$$),
        ('failed', 'failed_reason_check', 'exhausted',
         $$CHECK (reason IN ('conflict', 'permanent', 'malformed', 'exhausted'))$$)) AS v(tbl, con, added, chk)
    LOOP
        def := NULL;
        SELECT pg_get_constraintdef(oid) INTO def FROM pg_constraint
        WHERE conrelid = (s || '.' || r.tbl)::regclass AND conname = r.con;
        IF def IS NULL OR position(r.added IN def) = 0 THEN
            EXECUTE format('ALTER TABLE %s.%I DROP CONSTRAINT IF EXISTS %I', s, r.tbl, r.con);
            EXECUTE format('ALTER TABLE %s.%I ADD CONSTRAINT %I %s', s, r.tbl, r.con, r.chk);
        END IF;
    END LOOP;

    FOR r IN SELECT * FROM (VALUES
        ('inbox_received_at_idx'), ('parked_aggregate_idx'), ('failed_event_idx')) AS v(idx)
    LOOP
        IF to_regclass(s || '.' || r.idx) IS NOT NULL THEN -- versions without consumer names
            EXECUTE format('DROP INDEX %s.%I', s, r.idx);
        END IF;
    END LOOP;

    FOR r IN SELECT * FROM (VALUES
        ('inbox_consumer_received_at_idx', 'INDEX', 'inbox (consumer, received_at)'),
        ('parked_consumer_aggregate_idx', 'INDEX', 'parked (consumer, aggregate_type, aggregate_id, aggregate_version)'),
        ('failed_consumer_event_idx', 'UNIQUE INDEX', 'failed (consumer, event_id, reason, received_fingerprint)'),
        ('failed_open_idx', 'INDEX', 'failed (consumer, id) WHERE resolved_at IS NULL'),
        ('requests_open_idx', 'INDEX', 'requests (consumer, id) WHERE taken_at IS NULL')) AS v(idx, kind, def)
    LOOP
        IF to_regclass(s || '.' || r.idx) IS NULL THEN
            EXECUTE format('CREATE %s %I ON %s.%s', r.kind, r.idx, s, r.def);
        END IF;
    END LOOP;
END
$migrate$;
