package chaos

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/chaos/record"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// settleTimeout bounds the quiet end of a run: every fault healed and every router running, the
// harness waits for every committed row to arrive or be quarantined for as long as rows keep arriving, and
// at most this long after the last one did (a slow drain, such as a large one-aggregate transaction at one
// event per confirm, is not a stall; no progress for this long is). settleCap bounds the whole wait.
const (
	settleTimeout = 60 * time.Second
	settleCap     = 6 * time.Minute
)

// Run carries out plan against pg (a cluster of the harness's own, which faults stop and start) with the
// router binary bin, and returns the recorded history.
func Run(t testing.TB, pg *testenv.Postgres, bin string, plan gen.Plan) *check.History {
	t.Helper()
	w := newWorld(t, pg, bin, plan)
	if err := w.setUp(); err != nil {
		t.Fatalf("set up: %v", err)
	}
	s := plan.Setup
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writers := make([]*writer, s.Writers)
	for i := range writers {
		writers[i] = newWriter(w, i)
	}
	// The initial snapshot's rows, written before any router starts.
	for left := s.SnapshotRows; left > 0; left -= 100 {
		writers[0].do(ctx, gen.Step{Kind: gen.OpMulti, N: min(left, 100)})
	}
	stopConsumer, err := record.Consume(w.amqpURL, w.queue, w.rec)
	if err != nil {
		t.Fatalf("consumer: %v", err)
	}
	start := time.Now()
	w.rec.With(func(h *check.History) { h.Start = start })
	w.startAll()
	stopSampler, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		record.SampleReady(w.rec, s.Standby, w.routers.Targets, stopSampler)
	}()
	stopOperator, operated := make(chan struct{}), make(chan struct{})
	go func() { defer close(operated); w.operate(stopOperator) }()
	if plan.WaitForStreaming {
		w.waitStreaming()
		start = time.Now()
		w.rec.With(func(h *check.History) { h.Start = start })
	}

	var wg, bg sync.WaitGroup
	for i, wr := range writers {
		wg.Add(1)
		go func() { defer wg.Done(); wr.run(ctx, start, plan.Ops[i]) }()
	}
	w.inject(start, plan.Faults, &bg)
	if d := time.Until(start.Add(s.Duration)); d > 0 {
		time.Sleep(d)
	}
	cancel()
	wg.Wait()
	bg.Wait()
	w.pgProxy.Resume()
	w.mqProxy.Resume()

	rows := w.finalRows(writers)
	w.settle(rows)
	w.finishInbox()
	close(stopOperator)
	<-operated
	acked, quar := w.acked(), w.quarantine()
	w.rec.With(func(h *check.History) { h.Acked, h.Quar, h.Stopping = acked, quar, time.Now() })
	w.routers.StopAll()
	close(stopSampler)
	<-sampled
	stopConsumer()
	view := w.brokerView()

	h := w.rec.History()
	h.End = time.Now()
	h.Broker = view
	h.Rows = rows
	h.WindowRows = s.Lanes * s.Window * s.Routers()
	for _, ops := range plan.Ops {
		for _, op := range ops {
			h.MaxTxnRows = max(h.MaxTxnRows, op.N)
		}
	}
	return h
}

// allStreamed reports whether every router has logged that it streams (its initial snapshot done).
func (w *world) allStreamed() bool {
	all := true
	w.rec.With(func(h *check.History) {
		for i := range w.plan.Setup.Routers() {
			all = all && check.StreamedBefore(h, i, time.Now())
		}
	})
	return all
}

// waitStreaming waits until every router has logged that it streams.
func (w *world) waitStreaming() {
	deadline := time.Now().Add(2 * time.Minute)
	for !w.allStreamed() {
		if time.Now().After(deadline) {
			w.t.Fatalf("the routers did not stream within 2 minutes")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// finalRows is the tables' content joined with what the writers recorded: a row is committed when the
// table has it, whatever its writer saw.
func (w *world) finalRows(writers []*writer) []check.Row {
	byID := map[string]check.Row{}
	for _, r := range w.inflightRows {
		byID[r.ID] = r
	}
	for _, wr := range writers {
		for _, r := range wr.rows {
			byID[r.ID] = r
		}
		for _, c := range []*pgx.Conn{wr.conn, wr.intruder} {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}
	ctx := context.Background()
	c := w.connect(ctx)
	defer c.Close(ctx)
	var rows []check.Row
	tables := slices.Concat(w.plan.Setup.Tables, w.parts.detachedTables())
	if w.plan.Setup.Emit {
		tables = append([]string{emitted}, tables...)
	}
	seen := map[string]bool{}
	for _, table := range tables {
		rs, err := c.Query(ctx, `SELECT id::text FROM `+table)
		if err != nil {
			w.t.Fatalf("read %s: %v", table, err)
		}
		for rs.Next() {
			var id string
			rs.Scan(&id)
			r, ok := byID[id]
			if !ok {
				w.t.Errorf("%s holds row %s that no writer wrote", table, id)
				continue
			}
			rows = append(rows, r)
			seen[id] = true
		}
		rs.Close()
	}
	for _, r := range byID {
		// Deleted by its own transaction, or in a partition dropped since, which the writer saw commit; or
		// forged.
		if (r.Deleted || r.Partition > 0 && w.parts.dropped(r.Partition-1) && !seen[r.ID]) && !r.Unknown || r.Forged {
			rows = append(rows, r)
		}
	}
	return rows
}

// connect connects to the database directly, retrying while PostgreSQL restarts.
func (w *world) connect(context.Context) *pgx.Conn { return record.Connect(w.t, w.directURL()) }

// settle waits until every row is delivered or quarantined, or settleTimeout passes, then a little more
// so that late duplicates are recorded too.
func (w *world) settle(rows []check.Row) {
	deadline, limit, last := time.Now().Add(settleTimeout), time.Now().Add(settleCap), -1
	for time.Now().Before(deadline) && time.Now().Before(limit) {
		got := w.rec.Delivered()
		quar := map[string]bool{}
		for _, q := range w.quarantine() {
			quar[q.EventID] = true
		}
		left := 0
		w.rec.With(func(h *check.History) {
			streamed := map[string]bool{} // delivered by the stream, not only as a copy (check.NeedsStream)
			for _, d := range h.Deliv {
				if !d.Backfill || d.Replayed {
					streamed[d.MessageID] = true
				}
			}
			for _, r := range rows {
				if r.Forged {
					continue
				}
				if r.Refused && !quar[r.ID] || !got[r.ID] && !quar[r.ID] && !check.Unpublishable(h, r) ||
					got[r.ID] && !streamed[r.ID] && check.NeedsStream(h, r, quar[r.ID]) {
					left++
				}
			}
		})
		if left == 0 {
			break
		}
		if last < 0 || left < last { // progress: the drain goes on
			deadline, last = time.Now().Add(settleTimeout), left
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
}

// quarantine is the database's quarantine table.
func (w *world) quarantine() []check.Quarantined { return record.Quarantine(w.t, w.directURL()) }

// acked is each of the world's slots' confirmed_flush_lsn.
func (w *world) acked() map[string]cdc.LSN { return record.Acked(w.t, w.directURL(), w.db) }

// brokerView is what the broker says of the run's queues (type, messages ready and unacknowledged,
// consumers, state) and of its exchange's bindings, from rabbitmqctl (reading only), the lines that name
// the run's objects.
func (w *world) brokerView() string {
	var b strings.Builder
	for _, args := range [][]string{{"list_queues", "-q", "name", "type", "messages_ready", "messages_unacknowledged", "consumers", "state"},
		{"list_bindings", "-q", "source_name", "destination_name", "routing_key"}} {
		var out string
		var err error
		if w.broker != nil {
			out, err = w.broker.TryCtl(time.Minute, args...)
		} else {
			var o []byte
			o, err = testenv.Rabbitmqctl(w.t, append([]string{args[0], "-p", vhost}, args[1:]...)...).CombinedOutput()
			out = string(o)
		}
		if err != nil {
			fmt.Fprintf(&b, "rabbitmqctl %s: %v\n", args[0], err)
			continue
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, w.db) {
				fmt.Fprintf(&b, "%s: %s\n", args[0], strings.Join(strings.Fields(l), " "))
			}
		}
	}
	return b.String()
}
