package chaos

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// hotTransaction commits a gen.OpHot once every router streams (at most 30 s; an initial snapshot's copy is
// not what the kind measures): f.N rows of public.outbox in one transaction, in one INSERT, the even ones
// versions 1, 2, … of the hot aggregate order/hot<n>, the odd ones version 1 of order/hot<n>-<i>. Its rows
// join the committed rows as the held transactions' do (finalRows), with the transaction's xid as their
// Txn (the checker matches it with the routers' `resuming inside a transaction … xid=` lines); the faults
// that follow it in the schedule come after its commit, since the runner applies faults one after another.
func (w *world) hotTransaction(f gen.Step) {
	if !w.awaitAllStreaming(30 * time.Second) {
		w.t.Logf("hot-transaction skipped: the routers did not stream within 30 s")
		return
	}
	n := w.nextInflight()
	hot := fmt.Sprintf("hot%d", n)
	rows := make([]check.Row, f.N)
	ids, aggs, payloads := make([]string, f.N), make([]string, f.N), make([]string, f.N)
	versions := make([]int64, f.N)
	for i := range rows {
		agg, v := hot, int64(i/2+1)
		if i%2 == 1 {
			agg, v = fmt.Sprintf("%s-%d", hot, i), 1
		}
		rows[i] = check.Row{ID: uuid(), Table: "public.outbox", Aggregate: "order/" + agg, Version: v, Op: gen.OpHot}
		ids[i], aggs[i], versions[i] = rows[i].ID, agg, v
		payloads[i] = fmt.Sprintf(`{"token": %q, "v": %d}`, w.token, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := w.connect(ctx)
	defer c.Close(context.Background())
	began := time.Now()
	var xid int64 // as the routers log it (xid=, resuming inside a transaction)
	err := pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT txid_current() % 4294967296`).Scan(&xid); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
			SELECT i::uuid, 'order', a, v, 'created', p::jsonb, '{}'::jsonb FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
			WITH ORDINALITY AS u(i, a, v, p, o) ORDER BY o`, ids, aggs, versions, payloads)
		return err
	})
	now := time.Now()
	var after cdc.LSN
	if err == nil {
		var s string
		if c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s) == nil {
			after, _ = cdc.ParseLSN(s)
		}
	}
	for i := range rows {
		rows[i].Committed, rows[i].LSNAfter, rows[i].Unknown, rows[i].Txn = now, after, err != nil, int(xid)
	}
	w.addInflightRows(rows)
	w.t.Logf("hot-transaction at +%.2fs: %d rows, %d versions of order/%s, committed in %v (err %v)", began.Sub(w.start()).Seconds(),
		f.N, (f.N+1)/2, hot, now.Sub(began).Round(time.Millisecond), err)
}

// awaitAllStreaming waits up to d for every router to have logged that it streams, and reports whether all
// have.
func (w *world) awaitAllStreaming(d time.Duration) bool {
	for deadline := time.Now().Add(d); !w.allStreamed(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			return false
		}
	}
	return true
}

// start is the schedule's time zero.
func (w *world) start() time.Time {
	var t time.Time
	w.rec.With(func(h *check.History) { t = h.Start })
	return t
}
