package e2e

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// row is one outbox row a test wrote.
type row struct {
	id, aggType, aggID string
	version            int64
}

// writer inserts outbox rows over a fixed set of aggregates, in transactions of random size, interleaved
// with writes to another table. It remembers every committed row.
type writer struct {
	t        testing.TB
	db       *pgx.Conn
	aggs     int
	versions map[string]int64
	rows     []row
	rng      *mrand.Rand
}

func newWriter(t testing.TB, url string, aggs int) *writer {
	db, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close(context.Background()) })
	return &writer{t: t, db: db, aggs: aggs, versions: map[string]int64{}, rng: mrand.New(mrand.NewPCG(1, 2))}
}

func uuid() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// txn inserts n rows in one transaction (plus a write to another table) and commits, or rolls back.
func (w *writer) txn(n int, commit bool) error {
	ctx := context.Background()
	tx, err := w.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var ids, types, aggIDs []string
	var versions []int64
	pending := map[string]int64{}
	for i := 0; i < n; i++ {
		agg := fmt.Sprintf("agg-%03d", w.rng.IntN(w.aggs))
		v, ok := pending[agg]
		if !ok {
			v = w.versions[agg]
		}
		v++
		pending[agg] = v
		ids, types, aggIDs, versions = append(ids, uuid()), append(types, "order"), append(aggIDs, agg), append(versions, v)
	}
	_, err = tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		SELECT id, t, a, v, 'created', jsonb_build_object('n', v, 'agg', a),
		       jsonb_build_object('traceparent', '00-' || a, 'attempt', 1, 'ratio', 0.5, 'flag', true, 'nested', jsonb_build_object('k', 1), 'gone', null)
		FROM unnest($1::uuid[], $2::text[], $3::text[], $4::bigint[]) WITH ORDINALITY AS r(id, t, a, v, ord) ORDER BY ord`,
		ids, types, aggIDs, versions)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO other (note) VALUES ('unrelated')`); err != nil {
		return err
	}
	if !commit {
		return tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for i := range ids {
		w.rows = append(w.rows, row{ids[i], types[i], aggIDs[i], versions[i]})
	}
	for a, v := range pending {
		w.versions[a] = v
	}
	return nil
}

// write commits total rows in transactions of 1..maxTxn rows, with a pause between transactions.
func (w *writer) write(total, maxTxn int, pause time.Duration) {
	w.t.Helper()
	for written := 0; written < total; {
		n := min(1+w.rng.IntN(maxTxn), total-written)
		if err := w.txn(n, true); err != nil {
			w.t.Errorf("write: %v", err)
			return
		}
		written += n
		if pause > 0 {
			time.Sleep(pause)
		}
	}
}

// delivery is one message the test consumer received.
type delivery struct {
	id, aggType, aggID, routingKey string
	version                        int64
	msg                            amqp.Delivery
}

// consumer records every delivery on one queue.
type consumer struct {
	mu         sync.Mutex
	deliveries []delivery
}

func (e *env) consume(queue string) *consumer {
	e.t.Helper()
	ch := e.channel()
	msgs, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		e.t.Fatalf("consume %s: %v", queue, err)
	}
	c := &consumer{}
	go func() {
		for m := range msgs {
			v, _ := m.Headers["aggregate_version"].(int64)
			at, _ := m.Headers["aggregate_type"].(string)
			ai, _ := m.Headers["aggregate_id"].(string)
			c.mu.Lock()
			c.deliveries = append(c.deliveries, delivery{m.MessageId, at, ai, m.RoutingKey, v, m})
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *consumer) snapshot() []delivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]delivery(nil), c.deliveries...)
}

// waitFor waits until every row has been delivered at least once.
func (c *consumer) waitFor(t testing.TB, rows []row, timeout time.Duration) []delivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := c.snapshot()
		seen := map[string]bool{}
		for _, d := range got {
			seen[d.id] = true
		}
		missing := 0
		for _, r := range rows {
			if !seen[r.id] {
				missing++
			}
		}
		if missing == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events never arrived within %v (%d deliveries)", missing, len(rows), timeout, len(got))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// expectEveryEventInOrder waits until every row the writer committed has arrived, logs the counts under
// label, and checks that first deliveries per aggregate are in version order.
func expectEveryEventInOrder(t testing.TB, c *consumer, w *writer, label string, timeout time.Duration) {
	t.Helper()
	got := c.waitFor(t, w.rows, timeout)
	dups, _ := duplicates(got)
	t.Logf("%s: %d events, %d deliveries, %d duplicates", label, len(w.rows), len(got), dups)
	checkOrder(t, got)
}

// checkOrder asserts that the first delivery of each aggregate's versions comes in version order.
func checkOrder(t testing.TB, got []delivery) {
	t.Helper()
	first := map[string]bool{}
	last := map[string]int64{}
	bad := 0
	for _, d := range got {
		if first[d.id] {
			continue
		}
		first[d.id] = true
		key := d.aggType + "/" + d.aggID
		if d.version <= last[key] {
			if bad < 5 {
				t.Errorf("aggregate %s: version %d first delivered after version %d", key, d.version, last[key])
			}
			bad++
		}
		last[key] = max(last[key], d.version)
	}
	if bad > 0 {
		t.Errorf("%d first deliveries out of order", bad)
	}
}

// duplicates counts deliveries beyond the first of each id.
func duplicates(got []delivery) (dups int, ids []string) {
	n := map[string]int{}
	for _, d := range got {
		n[d.id]++
		if n[d.id] == 2 {
			ids = append(ids, d.id)
		}
		if n[d.id] > 1 {
			dups++
		}
	}
	sort.Strings(ids)
	return dups, ids
}

// unexpected returns deliveries whose id the test never committed.
func unexpected(got []delivery, rows []row) []string {
	want := map[string]bool{}
	for _, r := range rows {
		want[r.id] = true
	}
	var out []string
	for _, d := range got {
		if !want[d.id] {
			out = append(out, d.id)
		}
	}
	return out
}

func (e *env) scalar(sql string, args ...any) string {
	e.t.Helper()
	var s *string
	if err := e.db.QueryRow(context.Background(), sql, args...).Scan(&s); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return ""
	}
	return strings.TrimSpace(*s)
}
