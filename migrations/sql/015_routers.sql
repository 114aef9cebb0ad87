-- What each running router process runs with and how it is doing, one row per process (package registry
-- writes it): its role, the publication, tables, mappings (the mapping files' text), message prefix, shard,
-- exchange and its whole effective configuration with secrets masked, refreshed at every heartbeat and
-- marked stopped when the process ends. `cdc-router status` reads it, so that the operator's commands
-- need not be told again what the router runs with.
CREATE TABLE IF NOT EXISTS {{.Schema}}.routers (
    slot           text NOT NULL,
    instance       text NOT NULL,              -- host/pid/start time (unix seconds): one per process
    role           text NOT NULL,              -- starting, snapshot, streaming, standby, restarting, stopped
    publication    text NOT NULL,
    tables         text[] NOT NULL,
    mappings       jsonb NOT NULL DEFAULT '{}', -- qualified table name -> the text of its mapping file
    message_prefix text NOT NULL DEFAULT '',
    shard          text NOT NULL DEFAULT '',   -- i/N, or '' unsharded
    exchange       text NOT NULL DEFAULT '',
    settings       jsonb NOT NULL DEFAULT '{}', -- the effective configuration, key -> value, secrets masked
    version        text,
    host           text,
    pid            integer,
    started_at     timestamptz,
    heartbeat_at   timestamptz,
    stopped_at     timestamptz,
    last_error     text,
    PRIMARY KEY (slot, instance)
);

-- The documented grants (GRANT ... ON ALL TABLES IN SCHEMA) ran before this table existed. Each role other
-- than the owner that was granted UPDATE on positions (a router's role) is granted SELECT, INSERT, UPDATE
-- and DELETE here, and each that was granted SELECT there (a role that reads status) SELECT, as direct
-- grants (PUBLIC too when it holds them). Only the rights a role lacks here are granted, so a run by a role
-- that does not own the table changes nothing once they were; every run repeats it, so a role granted on
-- positions later is granted here at the next migrate.
DO {{.Dollar}}
DECLARE
    routers   regclass := format('%I.routers', {{.SchemaLiteral}})::regclass;
    positions regclass := to_regclass(format('%I.positions', {{.SchemaLiteral}}));
    g record;
BEGIN
    IF positions IS NULL THEN
        RETURN;
    END IF;
    FOR g IN
        SELECT a.grantee, r.privilege
        FROM pg_class p, aclexplode(p.relacl) a,
             LATERAL (VALUES ('UPDATE', 'SELECT'), ('UPDATE', 'INSERT'), ('UPDATE', 'UPDATE'), ('UPDATE', 'DELETE'),
                             ('SELECT', 'SELECT')) AS r(held, privilege)
        WHERE p.oid = positions AND a.privilege_type = r.held
          AND a.grantee <> (SELECT relowner FROM pg_class WHERE oid = routers)
          AND (a.grantee = 0 OR EXISTS (SELECT 1 FROM pg_roles WHERE oid = a.grantee))
        EXCEPT
        SELECT a.grantee, a.privilege_type
        FROM pg_class t, aclexplode(t.relacl) a
        WHERE t.oid = routers
        ORDER BY 1, 2
    LOOP
        EXECUTE format('GRANT %s ON %s TO %s', g.privilege, routers,
            CASE WHEN g.grantee = 0 THEN 'PUBLIC' ELSE quote_ident((SELECT rolname FROM pg_roles WHERE oid = g.grantee)) END);
    END LOOP;
END
{{.Dollar}};
