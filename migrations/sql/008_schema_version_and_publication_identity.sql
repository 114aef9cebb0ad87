-- The version of the router's schema: the highest numbered migration of the cdc-router that last ran
-- `migrate` here, written by migrate after every file (never lowered). A router refuses a schema newer than
-- the one it knows (a newer cdc-router migrated it) and an older one (run `migrate`).
CREATE TABLE IF NOT EXISTS {{.Schema}}.schema_version (
    one_row     boolean PRIMARY KEY DEFAULT true CHECK (one_row),
    version     integer NOT NULL,
    migrated_at timestamptz NOT NULL DEFAULT now()
);

-- What the publication checks compare across checks and restarts: identities holds, per outbox table, the
-- identity of its membership in the publication as the last sound check saw it (the publication's oid and
-- row version, the table's oid, the oid of its pg_publication_rel or pg_publication_namespace row), so a
-- table that left the publication and came back between two checks is noticed; gaps holds each window
-- found so ({table, from, to, where}) until the backfill that republishes it has run.
DO {{.Dollar}}
DECLARE
    c regclass := format('%I.publication_checks', {{.SchemaLiteral}})::regclass;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c AND attname = 'identities' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS identities jsonb', c);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = c AND attname = 'gaps' AND NOT attisdropped) THEN
        EXECUTE format('ALTER TABLE %s ADD COLUMN IF NOT EXISTS gaps jsonb', c);
    END IF;
END
{{.Dollar}};
