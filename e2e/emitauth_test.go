package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// roleConn creates a LOGIN role named after the test's database and suffix, runs each of grants (with %s for
// the role) as the superuser, and connects as it.
func (e *env) roleConn(suffix string, grants ...string) (string, *pgx.Conn) {
	e.t.Helper()
	ctx := context.Background()
	role := e.slot + "_" + suffix
	e.exec(`CREATE ROLE ` + role + ` LOGIN`)
	e.t.Cleanup(func() {
		e.db.Exec(ctx, `DROP OWNED BY `+role)
		e.db.Exec(ctx, `DROP ROLE `+role)
	})
	for _, g := range grants {
		e.exec(fmt.Sprintf(g, role))
	}
	u, err := url.Parse(e.pgURL)
	if err != nil {
		e.t.Fatal(err)
	}
	u.User = url.User(role)
	c, err := pgx.Connect(ctx, u.String())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { c.Close(ctx) })
	return role, c
}

// TestOnlyAuthorisedWritersPublishEmittedEvents sets the table-less outbox up as the docs say (migrate
// --emit-function --emit-role <writer>, the router as its least-privilege role) and lets a LOGIN-only role,
// a role with CONNECT and USAGE on the router's schema, and the writer try every path to an event: a direct
// pg_logical_emit_message with the prefix, emit, a forged MAC, a signed message copied into another
// transaction, reading the key, and (the writer) a schema of shadowing functions first in its search_path.
// Only the writer's events through emit arrive; each other message is quarantined as an unauthenticated
// emitted message with its content bounded, each other call is refused, and the stream goes on.
func TestOnlyAuthorisedWritersPublishEmittedEvents(t *testing.T) {
	const prefix = "cdc-router.outbox"
	ctx := context.Background()
	e := newStreamEnv(t)
	writerRole, writer := e.roleConn("writer")
	_, login := e.roleConn("login")
	_, schemaUser := e.roleConn("usage", `GRANT CONNECT ON DATABASE `+e.slot+` TO %s`, `GRANT USAGE ON SCHEMA cdc_router TO %s`)
	if out, code := e.cli("migrate", "--emit-function", "--emit-role", writerRole); code != 0 || !strings.Contains(out, "EXECUTE for: "+writerRole) {
		t.Fatalf("migrate --emit-function: exit %d:\n%s", code, out)
	}
	c := e.consume(e.queue)
	e.as(e.asRouterRole()).startStreaming("--message-prefix", prefix)
	peek := e.slot + "_peek" // to read what emit wrote, as an attacker with a slot could
	e.exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, peek)

	envelope := func(eventType string) string {
		return fmt.Sprintf(`{"id": "%s", "aggregate_type": "account", "aggregate_id": "7", "aggregate_version": 1,
			"event_type": %q, "payload": {"amount": 1000000}, "headers": {"traceparent": "00-attacker"}}`, uuid(), eventType)
	}
	var want []row
	emit := func(conn *pgx.Conn, eventType string) error {
		var id string
		err := conn.QueryRow(ctx, `SELECT cdc_router.emit('account', '7', 1, $1, '{"amount": 1}')::text`, eventType).Scan(&id)
		if err == nil {
			want = append(want, row{id: id})
		}
		return err
	}
	direct := func(conn *pgx.Conn, content []byte) {
		t.Helper()
		if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::bytea)`, prefix, content); err != nil {
			t.Fatalf("pg_logical_emit_message: %v", err)
		}
	}
	quarantined := 0
	for name, conn := range map[string]*pgx.Conn{"login": login, "usage": schemaUser, "writer": writer} {
		unsigned := envelope("attack." + name + ".unsigned")
		if name == "login" { // a large one: the quarantine keeps a bounded part of it
			unsigned = strings.Replace(unsigned, "1000000", strings.Repeat("9", 100<<10), 1)
		}
		direct(conn, []byte(unsigned))
		direct(conn, []byte("v1:1:"+strings.Repeat("ab", 32)+"\n"+envelope("attack."+name+".forged")))
		quarantined += 2
		if _, err := conn.Exec(ctx, `SELECT key FROM cdc_router.emit_keys`); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s reads the emit keys: %v", name, err)
		}
		if name == "writer" {
			continue
		}
		if err := emit(conn, "attack."+name+".emit"); err == nil || !strings.Contains(err.Error(), "permission denied") {
			t.Errorf("%s calls emit: %v, want permission denied", name, err)
		}
	}
	// The writer's own event, then a copy of its signed message in another transaction (the login role's).
	if err := emit(writer, "credited"); err != nil {
		t.Fatal(err)
	}
	var signed []byte
	if err := e.db.QueryRow(ctx, `SELECT substr(data, position('\x00'::bytea IN substr(data, 11)) + 15)
		FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', 'cdc_router_outbox',
		'messages', 'true') WHERE get_byte(data, 0) = 77 AND position('"credited"'::bytea IN data) > 0`, peek).Scan(&signed); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(signed, []byte("v1:1:")) {
		t.Fatalf("emit wrote %q, want a signature line first", signed)
	}
	direct(login, signed)
	quarantined++
	// The writer with its own functions named like pg_catalog's first in search_path: they never run.
	e.exec(`CREATE SCHEMA w AUTHORIZATION ` + writerRole)
	if _, err := writer.Exec(ctx, `CREATE TABLE w.pwned (who text);
		CREATE FUNCTION w.now() RETURNS timestamptz LANGUAGE sql AS $$ INSERT INTO w.pwned SELECT current_user RETURNING pg_catalog.now() $$;
		CREATE FUNCTION w.gen_random_uuid() RETURNS uuid LANGUAGE sql AS $$ INSERT INTO w.pwned SELECT current_user RETURNING pg_catalog.gen_random_uuid() $$;
		SET search_path = w, pg_catalog`); err != nil {
		t.Fatalf("shadowing schema: %v", err)
	}
	if err := emit(writer, "debited"); err != nil {
		t.Fatal(err)
	}
	var pwned int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM w.pwned`).Scan(&pwned); err != nil || pwned != 0 {
		t.Errorf("emit ran the writer's shadowing functions: %d times (%v)", pwned, err)
	}
	// The stream goes on: a row after all of it.
	var marker string
	if err := e.db.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', '1', 1, 'marker', '{}') RETURNING id::text`).Scan(&marker); err != nil {
		t.Fatal(err)
	}
	want = append(want, row{id: marker})

	c.waitFor(t, want, 60*time.Second)
	time.Sleep(time.Second) // anything extra would arrive right behind the marker
	for _, d := range c.snapshot() {
		if strings.HasPrefix(d.msg.Type, "attack.") || d.msg.Headers["traceparent"] == "00-attacker" {
			t.Errorf("published %s (%s), which no authorised writer emitted", d.id, d.msg.Type)
		}
	}
	if got := len(c.snapshot()); got != len(want) {
		t.Errorf("%d deliveries, want %d (the writer's two events and the marker)", got, len(want))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		// Records of messages anyone can emit are aggregated per reason and second (replication/burst.go):
		// a record stands for the number its reason names ("one record for N such messages"), else for one.
		var n, unauthenticated, maxStored int
		if err := e.db.QueryRow(ctx, `SELECT count(*),
			coalesce(sum(coalesce((substring(reason FROM 'one record for ([0-9]+) such messages'))::int, 1))
				FILTER (WHERE reason LIKE 'unauthenticated emitted message: %'), 0),
			coalesce(max(octet_length(row_values::text)), 0) FROM cdc_router.quarantine`).Scan(&n, &unauthenticated, &maxStored); err != nil {
			t.Fatal(err)
		}
		if n >= 2 && n <= quarantined && unauthenticated == quarantined && maxStored < 4096 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quarantine: %d records for %d unauthenticated messages, largest %d bytes; want %d unauthenticated "+
				"messages in at most as many records, bounded", n, unauthenticated, maxStored, quarantined)
		}
		time.Sleep(200 * time.Millisecond)
	}
	rows, _ := e.db.Query(ctx, `SELECT reason FROM cdc_router.quarantine ORDER BY lsn`)
	reasons, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"it carries no MAC", "does not match: forged, altered, or copied from another transaction"} {
		if !strings.Contains(strings.Join(reasons, "\n"), want) {
			t.Errorf("no quarantine reason says %q:\n%s", want, strings.Join(reasons, "\n"))
		}
	}
}

// TestMessagePrefixWithoutEmitKeyIsRefused: run --message-prefix refuses to start, naming the fix, when
// migrate --emit-function never made the signing key, and when the router's role cannot read it.
func TestMessagePrefixWithoutEmitKeyIsRefused(t *testing.T) {
	e := newEnv(t)
	for _, c := range []struct {
		env  *env
		want string
	}{
		{e, "run `cdc-router migrate --emit-function --emit-role <writer>`"},
	} {
		r := c.env.start("", "--message-prefix", "cdc-router.outbox")
		if code := r.wait(30 * time.Second); code != 1 || !strings.Contains(r.Output(), c.want) {
			t.Fatalf("exit %d:\n%s\nwant exit 1 naming %q", code, tail(r.Output(), 5), c.want)
		}
	}
	if out, code := e.cli("migrate", "--emit-function"); code != 0 {
		t.Fatalf("migrate: exit %d:\n%s", code, out)
	}
	routerURL := e.asRouterRole(`REVOKE SELECT ON cdc_router.emit_keys FROM %s`)
	r := e.as(routerURL).start("", "--message-prefix", "cdc-router.outbox")
	if code := r.wait(30 * time.Second); code != 1 || !strings.Contains(r.Output(), `GRANT SELECT ON "cdc_router"."emit_keys" TO`) {
		t.Fatalf("exit %d:\n%s\nwant exit 1 naming the grant", code, tail(r.Output(), 5))
	}
}

// TestEmitKeyRotationWhileRunning: `migrate --rotate-emit-key` under a running router. emit goes on signing
// with the old key until the new one's not_before (migrations.EmitKeyDelay later; the test moves it to now
// once the router has reloaded the keys), and the router, which reloads the keys while it streams, publishes
// the events of both keys and quarantines nothing.
func TestEmitKeyRotationWhileRunning(t *testing.T) {
	ctx := context.Background()
	e := newStreamEnv(t)
	if out, code := e.cli("migrate", "--emit-function"); code != 0 {
		t.Fatalf("migrate --emit-function: exit %d:\n%s", code, out)
	}
	c := e.consume(e.queue)
	r := e.startStreaming("--message-prefix", "cdc-router.outbox", "--publication-check-interval", "1s")
	peek := e.slot + "_peek"
	e.exec(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, peek)
	var want []row
	emit := func(eventType string) {
		t.Helper()
		var id string
		if err := e.db.QueryRow(ctx, `SELECT cdc_router.emit('order', '1', 1, $1, '{}')::text`, eventType).Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, row{id: id})
	}
	emit("before")
	if out, code := e.cli("migrate", "--emit-function", "--rotate-emit-key"); code != 0 {
		t.Fatalf("migrate --rotate-emit-key: exit %d:\n%s", code, out)
	}
	emit("during") // still the old key: the new one signs only from its not_before
	r.waitLog("emit keys reloaded", 30*time.Second)
	e.exec(`UPDATE cdc_router.emit_keys SET not_before = now() WHERE key_id = 2`)
	emit("after")
	c.waitFor(t, want, 60*time.Second)

	rows, _ := e.db.Query(ctx, `SELECT convert_from(substr(data, position('\x00'::bytea IN substr(data, 11)) + 15, 5), 'UTF8')
		FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', 'cdc_router_outbox',
		'messages', 'true') WHERE get_byte(data, 0) = 77`, peek)
	signatures, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(signatures, " ") != "v1:1: v1:1: v1:2:" {
		t.Errorf("signed with %v, want key 1, 1, then 2", signatures)
	}
	var quarantined int
	if err := e.db.QueryRow(ctx, `SELECT count(*) FROM cdc_router.quarantine`).Scan(&quarantined); err != nil || quarantined != 0 {
		t.Errorf("%d records quarantined (%v), want none", quarantined, err)
	}
}
