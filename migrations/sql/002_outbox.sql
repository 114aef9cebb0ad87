-- The outbox table that writers insert into in the same transaction as their business change.
CREATE TABLE IF NOT EXISTS {{.Table}} (
    id                uuid PRIMARY KEY,
    aggregate_type    text NOT NULL,
    aggregate_id      text NOT NULL,
    aggregate_version bigint NOT NULL,
    event_type        text NOT NULL,
    schema_version    int NOT NULL DEFAULT 1,
    payload           jsonb NOT NULL,
    headers           jsonb NOT NULL DEFAULT '{}',
    occurred_at       timestamptz NOT NULL DEFAULT now(),
    UNIQUE (aggregate_type, aggregate_id, aggregate_version)
);
