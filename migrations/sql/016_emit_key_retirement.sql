-- The emit keys (007) get retired_at, and their rows are kept from the roles that read every table through
-- pg_read_all_data. Every run, with or without --emit-function, once emit_keys exists; each change is made
-- only when missing, so a run by a role that does not own the table changes nothing once it was made.
--
-- retired_at: `migrate --emit-function --retire-emit-keys` (migrations/retire.go) sets it on every key older
-- than the newest; a retired key no longer signs (emit), yet the routers verify with it for EmitKeyGrace
-- after (LoadEmitKeys), so that an event it signed in a transaction still open, prepared or not yet decoded
-- is published; `migrate --emit-function` deletes it after that.
--
-- Row level security: pg_read_all_data reads every table "as if having SELECT rights", but it does not
-- bypass row level security. The policy shows the rows only to the roles granted SELECT on the table by its
-- ACL (the routers' roles, GRANT SELECT ON <schema>.emit_keys TO <role>), directly or through a role they
-- belong to; the owner (emit is SECURITY DEFINER, it signs as the owner), superusers and BYPASSRLS roles
-- are not subject to it. A pg_dump by a pg_read_all_data member therefore stops at this table: dump it as
-- its owner, or with --exclude-table-data (docs/operations.md, Security). Statistics of the key columns
-- (pg_statistic's histograms, which pg_read_all_data reads too) are never collected, and any collected
-- before are dropped (ALTER COLUMN TYPE drops a column's statistics).
DO {{.Dollar}}
DECLARE
    keys regclass := pg_catalog.to_regclass(pg_catalog.format('%I.emit_keys', {{.SchemaLiteral}}));
    col  text;
BEGIN
    IF keys IS NULL THEN
        RETURN;
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) keys
                   AND a.attname OPERATOR(pg_catalog.=) 'retired_at' AND NOT a.attisdropped) THEN
        EXECUTE pg_catalog.format('ALTER TABLE %s ADD COLUMN retired_at timestamptz', keys);
    END IF;
    IF NOT (SELECT c.relrowsecurity FROM pg_catalog.pg_class c WHERE c.oid OPERATOR(pg_catalog.=) keys) THEN
        EXECUTE pg_catalog.format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', keys);
    END IF;
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_policy p WHERE p.polrelid OPERATOR(pg_catalog.=) keys
                   AND p.polname OPERATOR(pg_catalog.=) 'granted_readers') THEN
        EXECUTE pg_catalog.format('CREATE POLICY granted_readers ON %s FOR SELECT USING (EXISTS (
            SELECT FROM pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
            WHERE c.oid OPERATOR(pg_catalog.=) %s::pg_catalog.oid AND a.privilege_type OPERATOR(pg_catalog.=) %L
              AND (a.grantee OPERATOR(pg_catalog.=) 0 OR pg_catalog.pg_has_role(CURRENT_USER, a.grantee, %L))))',
            keys, keys::pg_catalog.oid, 'SELECT', 'MEMBER');
    END IF;
    FOREACH col IN ARRAY ARRAY['key', 'ikey', 'okey'] LOOP
        IF EXISTS (SELECT FROM pg_catalog.pg_attribute a WHERE a.attrelid OPERATOR(pg_catalog.=) keys
                   AND a.attname OPERATOR(pg_catalog.=) col AND COALESCE(a.attstattarget::pg_catalog.int4, -1) OPERATOR(pg_catalog.<>) 0) THEN
            EXECUTE pg_catalog.format('ALTER TABLE %s ALTER COLUMN %I TYPE bytea, ALTER COLUMN %I SET STATISTICS 0', keys, col, col);
        END IF;
    END LOOP;
END
{{.Dollar}};
{{if .EmitFunction}}
-- The keys retired longer than the grace ago verify nothing any more: gone.
DELETE FROM {{.Schema}}.emit_keys WHERE retired_at OPERATOR(pg_catalog.<) (pg_catalog.now() OPERATOR(pg_catalog.-) {{.EmitKeyGrace}}::pg_catalog.interval);
{{end -}}
