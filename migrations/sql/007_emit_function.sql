{{if .EmitFunction -}}
-- Only with `migrate --emit-function`. Every role may call pg_logical_emit_message, so the router publishes
-- an emitted message only when it carries a MAC (HMAC-SHA256, decode/emitauth.go) over its envelope and its
-- transaction's xid, made with a key from emit_keys, which only this schema's owner and the router's role
-- read (never the writers). {{.Schema}}.emit is the one way writers sign: SECURITY DEFINER (it runs as its
-- owner, who reads the key), with a fixed search_path and schema-qualified calls (a writer's own functions
-- named like pg_catalog's are never called), EXECUTE only for the roles given with --emit-role. Every run
-- sets all of it again and keeps the key; --rotate-emit-key adds a new one (emit signs with the newest);
-- --retire-emit-keys retires the older ones (016, migrations/retire.go).

-- The keys, by id. key is the HMAC key; ikey and okey its inner and outer padded forms (64 bytes each:
-- the key padded with zeros, XOR 0x36 and 0x5c), so that emit computes sha256(okey || sha256(ikey || m)).
CREATE TABLE IF NOT EXISTS {{.Schema}}.emit_keys (
    key_id     integer PRIMARY KEY,
    key        bytea NOT NULL CHECK (pg_catalog.length(key) = 32),
    ikey       bytea NOT NULL CHECK (pg_catalog.length(ikey) = 64),
    okey       bytea NOT NULL CHECK (pg_catalog.length(okey) = 64),
    created_at timestamptz NOT NULL DEFAULT pg_catalog.now(),
    not_before timestamptz NOT NULL DEFAULT pg_catalog.now() -- emit signs with the newest key from this time on
);
REVOKE ALL ON {{.Schema}}.emit_keys FROM PUBLIC;

-- The first key, or with --rotate-emit-key one more: 256 bits hashed from four random UUIDs (122 random
-- bits each, from PostgreSQL's strong random source). A rotated key signs only {{.EmitKeyDelay}} after the
-- rotation: running routers reload the keys well within that (replication.EmitKeyInterval), so none meets a
-- key it lacks.
DO {{.Dollar}}
DECLARE
    k  bytea;
    ik bytea;
    ok bytea;
BEGIN
    IF {{.RotateEmitKey}} OR NOT EXISTS (SELECT FROM {{.Schema}}.emit_keys) THEN
        k := pg_catalog.sha256(pg_catalog.convert_to(pg_catalog.gen_random_uuid()::pg_catalog.text
            OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::pg_catalog.text
            OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::pg_catalog.text
            OPERATOR(pg_catalog.||) pg_catalog.gen_random_uuid()::pg_catalog.text, 'UTF8'));
        ik := k OPERATOR(pg_catalog.||) pg_catalog.decode(pg_catalog.repeat('00', 32), 'hex');
        ok := ik;
        FOR i IN 0..63 LOOP
            ik := pg_catalog.set_byte(ik, i, pg_catalog.get_byte(ik, i) OPERATOR(pg_catalog.#) 54);
            ok := pg_catalog.set_byte(ok, i, pg_catalog.get_byte(ok, i) OPERATOR(pg_catalog.#) 92);
        END LOOP;
        INSERT INTO {{.Schema}}.emit_keys (key_id, key, ikey, okey, not_before)
        SELECT coalesce(pg_catalog.max(key_id) OPERATOR(pg_catalog.+) 1, 1), k, ik, ok,
            CASE WHEN pg_catalog.count(*) OPERATOR(pg_catalog.=) 0 THEN pg_catalog.now()
                 ELSE pg_catalog.now() OPERATOR(pg_catalog.+) {{.EmitKeyDelay}}::pg_catalog.interval END
        FROM {{.Schema}}.emit_keys;
    END IF;
END
{{.Dollar}};

-- {{.Schema}}.emit writes one event without a table, as a transactional logical decoding message with the
-- prefix the router reads (`run --message-prefix`), in the caller's transaction: it is decoded at commit, in
-- the transaction's order, and never if the transaction rolls back. Nothing is stored, so a snapshot or
-- backfill cannot re-read it. It returns the event's id. The version is the caller's: no table holds the
-- previous one (keep it on the business row). The content is the signature line
-- "v1:<key id>:<hex MAC>\n", then the envelope (UTF-8 JSON).
CREATE OR REPLACE FUNCTION {{.Schema}}.emit(
    aggregate_type    text,
    aggregate_id      text,
    aggregate_version bigint,
    event_type        text,
    payload           jsonb,
    headers           jsonb DEFAULT '{}',
    schema_version    integer DEFAULT 1
) RETURNS uuid
LANGUAGE plpgsql VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS {{.Dollar}}
DECLARE
    event_id uuid := pg_catalog.gen_random_uuid();
    kid      integer;
    ik       bytea;
    ok       bytea;
    xid      pg_catalog.int8;
    envelope bytea;
    mac      bytea;
BEGIN
    IF aggregate_type IS NULL OR aggregate_id IS NULL OR aggregate_version IS NULL OR event_type IS NULL
       OR payload IS NULL OR schema_version IS NULL THEN
        RAISE EXCEPTION 'cdc-router emit: only headers may be NULL' USING ERRCODE = 'null_value_not_allowed';
    END IF;
    IF headers IS NOT NULL AND pg_catalog.jsonb_typeof(headers) OPERATOR(pg_catalog.<>) 'object' THEN
        RAISE EXCEPTION 'cdc-router emit: headers must be a JSON object, not %', pg_catalog.jsonb_typeof(headers)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    -- The newest key whose not_before the transaction began after. A retired one never signs (016): its
    -- transaction began before the newest key's not_before, which has passed since (the retirement waits for
    -- it), so that key signs instead, as it would at the next statement of a new transaction.
    SELECT k.key_id, k.ikey, k.okey INTO kid, ik, ok FROM {{.Schema}}.emit_keys k
        WHERE k.not_before OPERATOR(pg_catalog.<=) pg_catalog.now() AND k.retired_at IS NULL
        ORDER BY k.key_id DESC LIMIT 1;
    IF NOT FOUND THEN
        SELECT k.key_id, k.ikey, k.okey INTO kid, ik, ok FROM {{.Schema}}.emit_keys k
            WHERE k.not_before OPERATOR(pg_catalog.<=) pg_catalog.clock_timestamp() AND k.retired_at IS NULL
            ORDER BY k.key_id DESC LIMIT 1;
    END IF;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'cdc-router emit: emit_keys holds no active key: run `cdc-router migrate --emit-function`';
    END IF;
    envelope := pg_catalog.convert_to(pg_catalog.jsonb_build_object(
        'id', event_id,
        'aggregate_type', aggregate_type,
        'aggregate_id', aggregate_id,
        'aggregate_version', aggregate_version,
        'event_type', event_type,
        'schema_version', schema_version,
        'payload', payload,
        'headers', coalesce(headers, '{}'::pg_catalog.jsonb),
        'occurred_at', pg_catalog.now())::pg_catalog.text, 'UTF8');
    -- The top-level transaction's xid, low 32 bits: what pgoutput's Begin carries.
    xid := pg_catalog.pg_current_xact_id()::pg_catalog.text::pg_catalog.int8 OPERATOR(pg_catalog.%) 4294967296;
    mac := pg_catalog.sha256(ok OPERATOR(pg_catalog.||) pg_catalog.sha256(ik OPERATOR(pg_catalog.||)
        pg_catalog.convert_to('cdc-router emit v1' OPERATOR(pg_catalog.||) pg_catalog.chr(10) OPERATOR(pg_catalog.||)
            xid::pg_catalog.text OPERATOR(pg_catalog.||) pg_catalog.chr(10), 'UTF8') OPERATOR(pg_catalog.||) envelope));
    PERFORM pg_catalog.pg_logical_emit_message(true, {{.MessagePrefixLiteral}},
        pg_catalog.convert_to('v1:' OPERATOR(pg_catalog.||) kid::pg_catalog.text OPERATOR(pg_catalog.||) ':'
            OPERATOR(pg_catalog.||) pg_catalog.encode(mac, 'hex') OPERATOR(pg_catalog.||) pg_catalog.chr(10), 'UTF8')
        OPERATOR(pg_catalog.||) envelope);
    RETURN event_id;
END
{{.Dollar}};

-- Only the roles named with --emit-role may call emit (they get USAGE on the schema to reach it, which lets them
-- read no table); a re-run keeps the roles granted before.
REVOKE ALL ON FUNCTION {{.Schema}}.emit(text, text, bigint, text, jsonb, jsonb, integer) FROM PUBLIC;
{{range .EmitRoles -}}
DO {{$.Dollar}}
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) {{.Literal}}) THEN
        RAISE EXCEPTION 'role % (--emit-role) does not exist: create it first, or name an existing role', {{.Literal}};
    END IF;
    -- A writer that can read the keys can sign any event without emit (its owner and superusers can anyway).
    IF pg_catalog.has_table_privilege({{.Literal}}, pg_catalog.quote_ident({{$.SchemaLiteral}}) OPERATOR(pg_catalog.||) '.emit_keys', 'SELECT')
       AND NOT pg_catalog.pg_has_role({{.Literal}}, (SELECT c.relowner FROM pg_catalog.pg_class c
           WHERE c.oid OPERATOR(pg_catalog.=) (pg_catalog.quote_ident({{$.SchemaLiteral}}) OPERATOR(pg_catalog.||) '.emit_keys')::pg_catalog.regclass), 'USAGE') THEN
        RAISE EXCEPTION 'role % (--emit-role) can read %.emit_keys, so it could sign events without emit: REVOKE SELECT ON %.emit_keys FROM %, then migrate again',
            {{.Literal}}, {{$.SchemaLiteral}}, {{$.SchemaLiteral}}, {{.Literal}};
    END IF;
END
{{$.Dollar}};
GRANT USAGE ON SCHEMA {{$.Schema}} TO {{.Ident}};
GRANT EXECUTE ON FUNCTION {{$.Schema}}.emit(text, text, bigint, text, jsonb, jsonb, integer) TO {{.Ident}};
{{end -}}
{{- end}}
