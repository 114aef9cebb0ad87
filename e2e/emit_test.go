package e2e

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestEmittedMessagesAreEventsLikeRows runs the router with --message-prefix against transactions that mix
// outbox rows and events emitted with cdc_router.emit (created by migrate --emit-function): the events
// arrive in the transactions' order with the rows, with the same properties; an emitted event whose
// transaction rolled back is never published; an unsigned message and a non-transactional message are
// quarantined and the stream goes on; a message with another prefix is ignored; a transaction holding only
// a message is acknowledged like one holding rows.
func TestEmittedMessagesAreEventsLikeRows(t *testing.T) {
	const prefix = "cdc-router.outbox"
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	e := newStreamEnv(t)
	if out, code := e.cli("migrate", "--emit-function"); code != 0 || !strings.Contains(out, "function cdc_router.emit") {
		t.Fatalf("migrate --emit-function: exit %d:\n%s", code, out)
	}
	c := e.consume(e.queue)
	e.startStreaming("--message-prefix", prefix)
	ctx := context.Background()

	var want []string // event ids in the order they must arrive
	insertRow := func(tx pgx.Tx, version int) {
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			VALUES (gen_random_uuid(), 'order', '1', $1, 'row', '{}') RETURNING id::text`, version).Scan(&id); err != nil {
			t.Fatal(err)
		}
		want = append(want, id)
	}
	emit := func(tx pgx.Tx, version int) string {
		var id string
		if err := tx.QueryRow(ctx, `SELECT cdc_router.emit('order', '1', $1::bigint, 'paid', jsonb_build_object('n', $1::bigint),
			jsonb_build_object('traceparent', $2::text))::text`, version, tp).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	txn := func(fn func(tx pgx.Tx)) {
		if err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error { fn(tx); return nil }); err != nil {
			t.Fatal(err)
		}
	}

	txn(func(tx pgx.Tx) {
		insertRow(tx, 1)
		want = append(want, emit(tx, 2))
		insertRow(tx, 3)
		want = append(want, emit(tx, 4))
	})
	// Emitted, then rolled back: never published.
	rolledBack := func() string {
		tx, err := e.db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		return emit(tx, 5)
	}()
	// An unsigned (and malformed) message next to a good event: the first is quarantined, the second published.
	txn(func(tx pgx.Tx) {
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, '{"id": "not json')`, prefix); err != nil {
			t.Fatal(err)
		}
		want = append(want, emit(tx, 5))
	})
	// Non-transactional (written even if its transaction rolls back) and another tool's prefix.
	nonTxID := "0b7e0f4e-6c3a-4e43-9d0c-3a4b2c1d0e0f"
	e.exec(`SELECT pg_logical_emit_message(false, $1, json_build_object('id', $2::text, 'aggregate_type', 'order',
		'aggregate_id', '1', 'aggregate_version', 99, 'event_type', 'ghost', 'payload', '{}'::json)::text)`, prefix, nonTxID)
	e.exec(`SELECT pg_logical_emit_message(true, 'someone-else', '{"id": "` + nonTxID + `"}')`)
	// A transaction with nothing but a message, then a row as a marker.
	var onlyMessage string
	txn(func(tx pgx.Tx) { onlyMessage = emit(tx, 6); want = append(want, onlyMessage) })
	var afterOnlyMessage string
	if err := e.db.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()::text`).Scan(&afterOnlyMessage); err != nil {
		t.Fatal(err)
	}
	txn(func(tx pgx.Tx) { insertRow(tx, 7) })

	var rows []row
	for _, id := range want {
		rows = append(rows, row{id: id})
	}
	got := c.waitFor(t, rows, 60*time.Second)
	time.Sleep(time.Second) // anything extra would arrive right behind the marker
	got = c.snapshot()
	var order []string
	for _, d := range got {
		order = append(order, d.id)
		if d.id == rolledBack || d.id == nonTxID || d.msg.Type == "ghost" {
			t.Errorf("published %s (%s), which must not be", d.id, d.msg.Type)
		}
	}
	if !slices.Equal(order, want) {
		t.Errorf("delivery order\n %v\nwant the transactions' order\n %v", order, want)
	}
	for i, d := range got {
		if d.msg.Type != "paid" {
			continue
		}
		var body map[string]int
		if d.version != int64(i+1) || d.routingKey != "order.paid" || d.msg.Headers["traceparent"] != tp ||
			d.msg.ContentType != "application/json" || d.msg.Timestamp.IsZero() ||
			json.Unmarshal(d.msg.Body, &body) != nil || body["n"] != i+1 {
			t.Errorf("emitted event %d: version %d key %s headers %v body %s", i, d.version, d.routingKey, d.msg.Headers, d.msg.Body)
		}
	}

	// The records of messages anyone can emit are aggregated per second (quarantine.BurstWindow) and written
	// when the stream's loop next runs its duties, which may be after the events behind them were delivered.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var n int
		if err := e.db.QueryRow(ctx, `SELECT count(*) FROM cdc_router.quarantine`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n >= 2 || time.Now().After(deadline) {
			break
		}
	}
	qrows, _ := e.db.Query(ctx, `SELECT table_name, reason FROM cdc_router.quarantine ORDER BY lsn`)
	quarantined, err := pgx.CollectRows(qrows, func(r pgx.CollectableRow) (string, error) {
		var table, reason string
		err := r.Scan(&table, &reason)
		return table + ": " + reason, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(quarantined) != 2 || !strings.Contains(quarantined[0], "message:"+prefix+": unauthenticated emitted message: it carries no MAC") ||
		!strings.Contains(quarantined[1], "non-transactional message") {
		t.Errorf("quarantined:\n%s\nwant the unsigned message, then the non-transactional message", strings.Join(quarantined, "\n"))
	}

	// Replay cannot rebuild an event from a message record, and says what to do instead.
	var qid string
	if err := e.db.QueryRow(ctx, `SELECT min(id)::text FROM cdc_router.quarantine`).Scan(&qid); err != nil {
		t.Fatal(err)
	}
	if out, code := e.cli("quarantine", "replay", "--exchange", e.exchange, qid); code != 1 || !strings.Contains(out, "cannot be replayed") {
		t.Errorf("quarantine replay of a message record: exit %d:\n%s", code, out)
	} else {
		t.Logf("replay: %s", strings.TrimSpace(out))
	}

	// The slot's acknowledged position passes the transaction that held only a message.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var passed bool
		if err := e.db.QueryRow(ctx, `SELECT confirmed_flush_lsn >= $1::pg_lsn FROM pg_replication_slots WHERE slot_name = $2`,
			afterOnlyMessage, e.slot).Scan(&passed); err != nil {
			t.Fatal(err)
		}
		if passed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not acknowledged past %s, the transaction holding only a message", afterOnlyMessage)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMessagePrefixWithShardIsRefused: messages reach every shard's slot, so N sharded routers would each
// publish every emitted event.
func TestMessagePrefixWithShardIsRefused(t *testing.T) {
	e := newEnv(t)
	out, code := e.cli("run", "--message-prefix", "cdc-router.outbox", "--shard", "0/2")
	if code != 2 || !strings.Contains(out, "--message-prefix cannot be combined with --shard") {
		t.Fatalf("exit %d:\n%s", code, out)
	}
}
