package migrations

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// signedWith are the key ids of the signature lines of the messages emit wrote, in the order of the slot.
func signedWith(t *testing.T, c *pgx.Conn, slot string) []string {
	t.Helper()
	rows, _ := c.Query(context.Background(), `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'cdc_router_outbox', 'messages', 'true') WHERE get_byte(data, 0) = 77`, slot)
	msgs, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range msgs {
		_, content, _ := bytes.Cut(m[10:], []byte{0})
		line, _, _ := bytes.Cut(content[4:], []byte{'\n'})
		ids = append(ids, strings.Split(string(line), ":")[1])
	}
	return ids
}

// TestRetireEmitKeysWaitsForOlderTransactions: the measured loss of issue 35. An open transaction and a
// prepared one emit with key 1; key 2 is rotated in. RetireEmitKeys refuses while key 2's not_before is to
// come, then (not_before moved to now, as a test may) while the two transactions exist, naming the pid and
// the gid and the fix; waiting, it retires key 1 once they commit. Both events are signed with key 1, which
// still verifies (LoadEmitKeys) within EmitKeyGrace and is deleted by migrate after it; emit then signs with
// key 2.
func TestRetireEmitKeysWaitsForOlderTransactions(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	c := connectAs(t, url, "postgres")
	cfg := Config{Schema: "s", EmitFunction: true}
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	slot := testenv.Name(t)
	if _, err := c.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot) })
	open, prepared := connectAs(t, url, "postgres"), connectAs(t, url, "postgres")
	gid := "g_" + slot
	t.Cleanup(func() { c.Exec(ctx, `ROLLBACK PREPARED '`+gid+`'`) })
	var pid int
	if _, err := open.Exec(ctx, `BEGIN; SELECT s.emit('order', '1', 1, 'open', '{}')`); err != nil {
		t.Fatal(err)
	}
	if err := open.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := prepared.Exec(ctx, `BEGIN; SELECT s.emit('order', '2', 1, 'prepared', '{}'); PREPARE TRANSACTION '`+gid+`'`); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, c, Config{Schema: "s", EmitFunction: true, RotateEmitKey: true}); err != nil {
		t.Fatal(err)
	}

	var p *Problem
	_, err := RetireEmitKeys(ctx, c, "s", 0, nil)
	if !errors.As(err, &p) || !strings.Contains(err.Error(), "key 2 signs only from") || !strings.Contains(err.Error(), "--wait") {
		t.Fatalf("retire before key 2 signs: %v, want a problem naming its not_before", err)
	}
	if _, err := c.Exec(ctx, `UPDATE s.emit_keys SET not_before = now() WHERE key_id = 2`); err != nil {
		t.Fatal(err)
	}
	_, err = RetireEmitKeys(ctx, c, "s", 0, nil)
	for _, want := range []string{"2 transaction(s)", "pid " + strconv.Itoa(pid) + " (transaction began ", "prepared transaction '" + gid + "'",
		"COMMIT PREPARED", "--wait"} {
		if !errors.As(err, &p) || !strings.Contains(err.Error(), want) {
			t.Fatalf("retire with an open and a prepared transaction: %v, want a problem naming %q", err, want)
		}
	}

	// A cancelled wait ends at once, naming what it waited for.
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = RetireEmitKeys(cctx, c, "s", time.Minute, nil)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), gid) {
		t.Fatalf("cancelled wait: %v", err)
	}

	committed := make(chan struct{}) // the connections are closed at cleanup, after their last use here
	go func() {
		defer close(committed)
		time.Sleep(time.Second)
		open.Exec(ctx, `COMMIT`)
		prepared.Exec(ctx, `COMMIT PREPARED '`+gid+`'`)
	}()
	var told string
	r, err := RetireEmitKeys(ctx, c, "s", time.Minute, func(msg string) { told = msg })
	<-committed
	if err != nil || !slices.Equal(r.Keys, []int32{1}) || r.Signing != 2 || !strings.Contains(told, "waiting up to") {
		t.Fatalf("retire after the commits: %+v %v (told %q), want key 1 retired, key 2 signing", r, err, told)
	}
	if keys, err := LoadEmitKeys(ctx, c, "s"); err != nil || len(keys) != 2 {
		t.Fatalf("keys loaded after the retirement: %d %v, want 2 (key 1 verifies within the grace)", len(keys), err)
	}
	if _, err := c.Exec(ctx, `SELECT s.emit('order', '3', 1, 'after', '{}')`); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(signedWith(t, c, slot), " "); got != "1 1 2" {
		t.Errorf("signed with keys %s, want 1 1 2 (the two transactions, then a new one)", got)
	}

	if _, err := c.Exec(ctx, `UPDATE s.emit_keys SET retired_at = now() - interval '25 hours' WHERE key_id = 1`); err != nil {
		t.Fatal(err)
	}
	if keys, err := LoadEmitKeys(ctx, c, "s"); err != nil || len(keys) != 1 || keys[2] == nil {
		t.Fatalf("keys loaded after the grace: %d %v, want key 2 only", len(keys), err)
	}
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM s.emit_keys`).Scan(&n); err != nil || n != 1 {
		t.Errorf("%d keys after migrate past the grace (%v), want 1", n, err)
	}
	if r, err := RetireEmitKeys(ctx, c, "s", 0, nil); err != nil || len(r.Keys) != 0 || r.Signing != 2 {
		t.Errorf("retire with one key: %+v %v, want nothing retired", r, err)
	}
}

// TestEmitSignsAfterItsKeyIsRetired: a transaction that began before key 2's not_before (so emit would
// choose key 1 by its start time) and calls emit only after key 1 was retired signs with key 2 instead of
// failing the writer's transaction.
func TestEmitSignsAfterItsKeyIsRetired(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	c := connectAs(t, url, "postgres")
	if err := Apply(ctx, c, Config{Schema: "s", EmitFunction: true, RotateEmitKey: false}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(ctx, c, Config{Schema: "s", EmitFunction: true, RotateEmitKey: true}); err != nil {
		t.Fatal(err)
	}
	slot := testenv.Name(t)
	if _, err := c.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot) })
	w := connectAs(t, url, "postgres")
	tx, err := w.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1`); err != nil { // began, no transaction id yet
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if _, err := c.Exec(ctx, `UPDATE s.emit_keys SET not_before = now() WHERE key_id = 2`); err != nil {
		t.Fatal(err)
	}
	if r, err := RetireEmitKeys(ctx, c, "s", 0, nil); err != nil || !slices.Equal(r.Keys, []int32{1}) {
		t.Fatalf("retire: %+v %v", r, err)
	}
	if _, err := tx.Exec(ctx, `SELECT s.emit('order', '1', 1, 'late', '{}')`); err != nil {
		t.Fatalf("emit in a transaction that began before key 2 signs, after key 1 was retired: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(signedWith(t, c, slot), " "); got != "2" {
		t.Errorf("signed with key %s, want 2", got)
	}
}
