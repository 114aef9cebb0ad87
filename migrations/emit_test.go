package migrations

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// TestEmitFunction: <schema>.emit exists only with EmitFunction, is created again without harm, refuses
// NULLs and headers that are not an object in the caller's transaction, and writes a transactional
// message with the configured prefix (even one holding a quote) whose content is the envelope.
func TestEmitFunction(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	exists := func() bool {
		var ok bool
		if err := c.QueryRow(ctx, `SELECT to_regprocedure('s.emit(text,text,bigint,text,jsonb,jsonb,integer)') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if err := Apply(ctx, c, Config{Schema: "s"}); err != nil {
		t.Fatal(err)
	}
	if exists() {
		t.Fatal("emit created without EmitFunction")
	}
	cfg := Config{Schema: "s", EmitFunction: true, MessagePrefix: "it's.outbox"}
	for range 2 {
		if err := Apply(ctx, c, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if !exists() {
		t.Fatal("emit not created")
	}
	for call, want := range map[string]string{
		`SELECT s.emit('order', NULL, 1, 'paid', '{}')`:            "only headers may be NULL",
		`SELECT s.emit('order', '1', 1, 'paid', NULL)`:             "only headers may be NULL",
		`SELECT s.emit('order', '1', 1, 'paid', '{}', '[1]')`:      "headers must be a JSON object, not array",
		`SELECT s.emit('order', '1', 1, 'paid', '{}', '{}', NULL)`: "only headers may be NULL",
	} {
		if _, err := c.Exec(ctx, call); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", call, err, want)
		}
	}

	if _, err := c.Exec(ctx, `SELECT pg_create_logical_replication_slot('emit_test', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	defer c.Exec(ctx, `SELECT pg_drop_replication_slot('emit_test')`)
	if _, err := c.Exec(ctx, `SELECT s.emit('order', '42', 7, 'paid', '{"n": 1}', NULL)`); err != nil {
		t.Fatal(err)
	}
	rows, err := c.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes('emit_test', NULL, NULL,
		'proto_version', '1', 'publication_names', 'cdc_router_outbox', 'messages', 'true')`)
	if err != nil {
		t.Fatal(err)
	}
	var msgs [][]byte
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		if len(b) > 0 && b[0] == 'M' {
			msgs = append(msgs, b)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	// 'M', flags (1: transactional), LSN (8 bytes), prefix NUL, length (4 bytes), content.
	m := msgs[0]
	prefix, content, _ := bytes.Cut(m[10:], []byte{0})
	if m[1] != 1 || string(prefix) != "it's.outbox" {
		t.Fatalf("message flags %d prefix %q", m[1], prefix)
	}
	for _, want := range []string{`"aggregate_type": "order"`, `"aggregate_id": "42"`, `"aggregate_version": 7`,
		`"event_type": "paid"`, `"payload": {"n": 1}`, `"headers": {}`, `"schema_version": 1`, `"id": "`, `"occurred_at": "`} {
		if !bytes.Contains(content[4:], []byte(want)) {
			t.Errorf("envelope %s lacks %s", content[4:], want)
		}
	}
}
