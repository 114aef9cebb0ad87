package migrations

import (
	"bytes"
	"context"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// connectAs connects to the database of url as role (the test cluster trusts every local role).
func connectAs(t *testing.T, url, role string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.User = role
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// shadowingSQL makes schema w, owned by role, hold functions and an operator named like those emit calls,
// each recording who ran it in w.pwned and trying to copy the emit keys of schema s into w.stolen.
func shadowingSQL(w, s, role string) string {
	var b strings.Builder
	b.WriteString(`CREATE SCHEMA ` + w + ` AUTHORIZATION ` + role + `;
		CREATE TABLE ` + w + `.pwned (who text, fn text); CREATE TABLE ` + w + `.stolen (k bytea);
		GRANT ALL ON ` + w + `.pwned, ` + w + `.stolen TO PUBLIC;
		CREATE FUNCTION ` + w + `.steal(fn text) RETURNS void LANGUAGE plpgsql AS $f$ BEGIN
			INSERT INTO ` + w + `.pwned VALUES (current_user, fn);
			BEGIN INSERT INTO ` + w + `.stolen SELECT key FROM ` + s + `.emit_keys; EXCEPTION WHEN OTHERS THEN NULL; END;
		END $f$;`)
	for _, f := range []struct{ sig, ret, call string }{
		{"gen_random_uuid()", "uuid", "pg_catalog.gen_random_uuid()"},
		{"now()", "timestamptz", "pg_catalog.now()"},
		{"sha256(b bytea)", "bytea", "pg_catalog.sha256(b)"},
		{"convert_to(t text, e name)", "bytea", "pg_catalog.convert_to(t, e)"},
		{"encode(b bytea, f text)", "text", "pg_catalog.encode(b, f)"},
		{"pg_current_xact_id()", "xid8", "pg_catalog.pg_current_xact_id()"},
		{"jsonb_typeof(j jsonb)", "text", "pg_catalog.jsonb_typeof(j)"},
		{"coalesce_bytes(a bytea, b bytea)", "bytea", "pg_catalog.byteacat(a, b)"},
	} {
		name, _, _ := strings.Cut(f.sig, "(")
		b.WriteString(`CREATE FUNCTION ` + w + `.` + f.sig + ` RETURNS ` + f.ret + ` LANGUAGE plpgsql AS $f$ BEGIN
			PERFORM ` + w + `.steal('` + name + `'); RETURN ` + f.call + `; END $f$;`)
	}
	b.WriteString(`CREATE OPERATOR ` + w + `.|| (LEFTARG = bytea, RIGHTARG = bytea, FUNCTION = ` + w + `.coalesce_bytes);
		ALTER FUNCTION ` + w + `.steal(text) OWNER TO ` + role + `;`)
	return b.String()
}

// TestEmitFunctionHardening: migrate --emit-function makes emit SECURITY DEFINER with search_path pg_catalog,
// pg_temp, revokes EXECUTE from PUBLIC and grants it to the --emit-role roles, and a re-run keeps all of it
// and the key (only --rotate-emit-key adds one). The key is readable by no writer; a writer calling emit
// with its own schema first in search_path, holding functions and an operator named like those emit uses,
// gains nothing (they never run); a role not named cannot call emit; the MAC emit writes verifies in Go over
// the envelope and the transaction's xid. A role that does not exist, or a writer that can read the keys,
// is refused naming the fix.
func TestEmitFunctionHardening(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	c := connectAs(t, url, "postgres")
	writer, other := testenv.Name(t), testenv.Name(t)
	for _, r := range []string{writer, other} {
		if _, err := c.Exec(ctx, "CREATE ROLE "+r+" LOGIN"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Exec(ctx, "DROP OWNED BY "+r+"; DROP ROLE "+r) })
	}
	const emitSig = "s.emit(text,text,bigint,text,jsonb,jsonb,integer)"
	cfg := Config{Schema: "s", EmitFunction: true, EmitRoles: []string{writer}}
	keyOf := func() map[uint32][]byte {
		keys, err := LoadEmitKeys(ctx, c, "s")
		if err != nil {
			t.Fatal(err)
		}
		return keys
	}
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	first := keyOf()
	// The second run, like every upgrade's, names no role: the grants stay.
	if err := Apply(ctx, c, Config{Schema: "s", EmitFunction: true}); err != nil {
		t.Fatal(err)
	}
	var secdef bool
	var config []string
	if err := c.QueryRow(ctx, `SELECT prosecdef, proconfig FROM pg_proc WHERE oid = $1::regprocedure`, emitSig).Scan(&secdef, &config); err != nil {
		t.Fatal(err)
	}
	if !secdef || strings.Join(config, ";") != "search_path=pg_catalog, pg_temp" {
		t.Errorf("after a re-run: prosecdef %v proconfig %v, want SECURITY DEFINER with search_path=pg_catalog, pg_temp", secdef, config)
	}
	if grantees, err := EmitGrantees(ctx, c, "s"); err != nil || strings.Join(grantees, ",") != writer {
		t.Errorf("EXECUTE on emit after a re-run: %v %v, want only %s", grantees, err, writer)
	}
	var writerReads, otherReads bool
	if err := c.QueryRow(ctx, `SELECT has_table_privilege($1, 's.emit_keys', 'SELECT'), has_table_privilege($2, 's.emit_keys', 'SELECT')`,
		writer, other).Scan(&writerReads, &otherReads); err != nil {
		t.Fatal(err)
	}
	if writerReads || otherReads {
		t.Errorf("the emit keys are readable: writer %v, other %v", writerReads, otherReads)
	}
	if again := keyOf(); len(again) != 1 || !bytes.Equal(again[1], first[1]) {
		t.Errorf("a re-run changed the keys: %d keys", len(again))
	}

	// The writer, with its shadowing schema first in search_path, emits; the functions never run.
	if _, err := c.Exec(ctx, shadowingSQL("w", "s", writer)+"; GRANT USAGE ON SCHEMA s TO "+other); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, testenv.Name(t)); err != nil {
		t.Fatal(err)
	}
	wc := connectAs(t, url, writer)
	if _, err := wc.Exec(ctx, `SET search_path = w, pg_catalog`); err != nil {
		t.Fatal(err)
	}
	var xid uint64
	err := pgx.BeginFunc(ctx, wc, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT s.emit('order', '1', 1, 'paid', '{"n": 1}')`); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `SELECT pg_catalog.pg_current_xact_id()::text::bigint`).Scan(&xid)
	})
	if err != nil {
		t.Fatalf("the writer's emit: %v", err)
	}
	var pwned, stolen int
	if err := c.QueryRow(ctx, `SELECT (SELECT count(*) FROM w.pwned), (SELECT count(*) FROM w.stolen)`).Scan(&pwned, &stolen); err != nil {
		t.Fatal(err)
	}
	if pwned != 0 || stolen != 0 {
		t.Errorf("emit ran the writer's shadowing functions %d times, %d keys stolen", pwned, stolen)
	}
	if _, err := wc.Exec(ctx, `SELECT key FROM s.emit_keys`); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("the writer reads the keys: %v", err)
	}
	oc := connectAs(t, url, other)
	if _, err := oc.Exec(ctx, `SELECT s.emit('order', '1', 1, 'paid', '{}')`); err == nil || !strings.Contains(err.Error(), "permission denied") {
		t.Errorf("a role not named calls emit: %v", err)
	}

	// What emit wrote verifies with the key, over the envelope and the xid.
	var content []byte
	if err := c.QueryRow(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes((SELECT slot_name FROM pg_replication_slots LIMIT 1),
		NULL, NULL, 'proto_version', '1', 'publication_names', 'cdc_router_outbox', 'messages', 'true') WHERE get_byte(data, 0) = 77`).Scan(&content); err != nil {
		t.Fatal(err)
	}
	_, content, _ = bytes.Cut(content[10:], []byte{0})
	line, envelope, _ := bytes.Cut(content[4:], []byte{'\n'})
	want := "v1:1:" + hex.EncodeToString(decode.EmitMAC(first[1], uint32(xid), envelope))
	if string(line) != want || !bytes.Contains(envelope, []byte(`"payload": {"n": 1}`)) {
		t.Errorf("emitted %q, want the signature line %q and the envelope", content, want)
	}

	// Rotation adds a key, which emit uses.
	if err := Apply(ctx, c, Config{Schema: "s", EmitFunction: true, RotateEmitKey: true}); err != nil {
		t.Fatal(err)
	}
	if keys := keyOf(); len(keys) != 2 || !bytes.Equal(keys[1], first[1]) || len(keys[2]) != 32 {
		t.Errorf("after --rotate-emit-key: %d keys", len(keys))
	}

	// Refusals naming the fix.
	for _, c2 := range []struct {
		roles      []string
		setup, fix string
	}{
		{[]string{"no_such_role"}, "", "role no_such_role (--emit-role) does not exist"},
		{[]string{other}, "GRANT SELECT ON s.emit_keys TO " + other, "REVOKE SELECT ON s.emit_keys FROM " + other},
	} {
		if c2.setup != "" {
			if _, err := c.Exec(ctx, c2.setup); err != nil {
				t.Fatal(err)
			}
		}
		err := Apply(ctx, c, Config{Schema: "s", EmitFunction: true, EmitRoles: c2.roles})
		if _, ok := err.(*Problem); !ok || !strings.Contains(err.Error(), c2.fix) {
			t.Errorf("--emit-role %v: %v, want a problem naming %q", c2.roles, err, c2.fix)
		}
	}
}

// TestEmitFunctionOddNames: a schema and a writer role whose names hold quotes and dollar signs get the
// same emit, key and grants, and the writer's emit verifies.
func TestEmitFunctionOddNames(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	c := connectAs(t, url, "postgres")
	schema, role := `S'$$x`, `Wr'it$$er `+testenv.Name(t)
	if _, err := c.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c.Exec(ctx, "DROP OWNED BY "+pgx.Identifier{role}.Sanitize()+"; DROP ROLE "+pgx.Identifier{role}.Sanitize())
	})
	for range 2 {
		if err := Apply(ctx, c, Config{Schema: schema, EmitFunction: true, EmitRoles: []string{role}, MessagePrefix: `p'$$`}); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := LoadEmitKeys(ctx, c, schema)
	if err != nil || len(keys) != 1 {
		t.Fatalf("keys %d: %v", len(keys), err)
	}
	if grantees, err := EmitGrantees(ctx, c, schema); err != nil || len(grantees) != 1 || grantees[0] != role {
		t.Fatalf("grantees %q: %v", grantees, err)
	}
	wc := connectAs(t, url, role)
	if _, err := wc.Exec(ctx, `SELECT `+pgx.Identifier{schema}.Sanitize()+`.emit('order', '1', 1, 'paid', '{}')`); err != nil {
		t.Fatalf("the writer's emit: %v", err)
	}
}
