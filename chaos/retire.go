package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// retireInFlight plays gen.CmdRetireInFlight beside the other faults (bg): an open and a prepared
// transaction that emitted events with the current key, a third that began before the rotation and has not
// written, the key rotated, the new key made to sign at once once every router holds it, then the old key
// retired around the held transactions as f.N says; then the third transaction emits and commits, and one
// more event is emitted. Every path commits the held transactions (and the test's cleanup rolls back any
// prepared one left). Each step is recorded for check's retire-refuses-transactions-in-flight; the events
// are rows of the history, which invariant 1 holds to (published, not quarantined as forged).
func (w *world) retireInFlight(f gen.Step, bg *sync.WaitGroup) {
	bg.Add(1)
	go func() {
		defer bg.Done()
		w.retire(f)
	}()
}

func (w *world) retire(f gen.Step) {
	ctx := context.Background()
	skip := func(from time.Time, why string) {
		w.rec.Event(check.Event{From: from, To: time.Now(), Kind: gen.CmdRetireInFlight, Note: "skipped: " + check.Trim(why, 300)})
	}
	if !w.awaitStreaming(0, 30*time.Second) {
		skip(time.Now(), "router 0 did not stream within 30 s")
		return
	}
	w.t.Cleanup(w.rollbackPrepared)
	n := w.nextInflight()
	h := &heldTxns{n: n, gid: fmt.Sprintf("chaos_%s_%d", w.db, n)}
	from := time.Now()
	err := w.hold(ctx, h)
	defer func() { w.addInflightRows(w.commitHeld(ctx, h)) }()
	if err != nil {
		skip(from, err.Error())
		return
	}
	late, err := pgx.Connect(ctx, w.roleURL(w.writerRole()))
	if err != nil {
		skip(from, err.Error())
		return
	}
	defer late.Close(ctx)
	lateTx, err := late.Begin(ctx)
	if err == nil {
		_, err = lateTx.Exec(ctx, `SELECT 1`) // the transaction's start, before the rotation; no transaction id
	}
	if err != nil {
		skip(from, err.Error())
		return
	}

	rotated := time.Now()
	if out, code := w.cli(time.Minute, append(w.migrateArgs(), "--rotate-emit-key")...); code != 0 {
		skip(from, fmt.Sprintf("migrate --rotate-emit-key exited %d: %s", code, refusal(out)))
		return
	}
	if !w.awaitKeysReloaded(rotated, 30*time.Second) {
		// The new key keeps its real not_before (2 min on): it signs nothing during the run.
		skip(from, "a router did not reload its emit keys within 30 s of the rotation")
		return
	}
	if err := w.signNow(ctx); err != nil {
		skip(from, err.Error())
		return
	}

	names := []string{"prepared transaction '" + h.gid + "'"} // a prepared transaction outlives a PostgreSQL restart
	if _, err := h.open.Exec(ctx, `SELECT 1`); err == nil {   // the open one does not: named only while it lives
		names = append(names, fmt.Sprintf("pid %d (", h.openPID))
	}
	retire := append(w.migrateArgs(), "--retire-emit-keys")
	if f.N == gen.RetireHeld {
		from = time.Now()
		out, code := w.cli(time.Minute, retire...)
		w.rec.Event(check.Event{From: from, To: time.Now(), Kind: gen.CmdRetireInFlight, IDs: names, Note: cmdOutcome(out, code)})
		w.addInflightRows(w.commitHeld(ctx, h))
		from = time.Now()
		out, code = w.cli(time.Minute, append(retire, "--wait", "30s")...)
		w.rec.Event(check.Event{From: from, To: time.Now(), Kind: check.KindRetireAfter, Note: cmdOutcome(out, code)})
	} else {
		type result struct {
			out  string
			code int
			at   time.Time
		}
		done := make(chan result, 1)
		from = time.Now()
		go func() {
			out, code := w.cli(time.Minute, append(retire, "--wait", "20s")...)
			done <- result{out, code, time.Now()}
		}()
		time.Sleep(2 * time.Second) // its first look finds them; it polls every 500 ms
		w.addInflightRows(w.commitHeld(ctx, h))
		committed := time.Now()
		r := <-done
		e := check.Event{From: from, To: r.at, Kind: gen.CmdRetireInFlight, Note: cmdOutcome(r.out, r.code)}
		if r.at.Before(committed) {
			e.IDs = names // it ended while they were in flight: it must have refused, naming them
		}
		w.rec.Event(e)
	}
	w.addInflightRows(w.emitAfter(ctx, late, lateTx, n))
}

// cmdOutcome is a command's result as the history records it: "exit <code>: <its output on one line>", of a
// long output its end, where migrate says what it did with the keys (its first lines say what it migrated).
func cmdOutcome(out string, code int) string {
	flat := []rune(strings.Join(strings.Fields(out), " "))
	if len(flat) > 1500 {
		flat = append([]rune("…"), flat[len(flat)-1500:]...)
	}
	return fmt.Sprintf("exit %d: %s", code, string(flat))
}

// awaitKeysReloaded waits up to d for every router to hold the keys as they are since `since`: it logged
// `emit keys reloaded` after it, or started a stream (which loads them) a second or more after it.
func (w *world) awaitKeysReloaded(since time.Time, d time.Duration) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(200 * time.Millisecond) {
		all := true
		w.rec.With(func(h *check.History) {
			for i := range w.plan.Setup.Routers() {
				ok := false
				for _, l := range h.Logs {
					ok = ok || l.Router == i && (l.At.After(since) && strings.Contains(l.Text, "emit keys reloaded") ||
						l.At.After(since.Add(time.Second)) && strings.Contains(l.Text, "msg=streaming"))
				}
				all = all && ok
			}
		})
		if all || time.Now().After(deadline) {
			return all
		}
	}
}

// signNow is the e2e tests' shortcut past the new key's delay (migrations.EmitKeyDelay, 2 min): its
// not_before moved to now, once every router holds it.
func (w *world) signNow(ctx context.Context) error {
	c, err := pgx.Connect(ctx, w.directURL())
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, `UPDATE cdc_router.emit_keys SET not_before = now()
		WHERE key_id = (SELECT max(key_id) FROM cdc_router.emit_keys) AND not_before > now()`)
	return err
}

// emitAfter emits after the retirement: in the transaction that began before the rotation (lateTx; emit
// must not fail because the key of its start was retired), then in one of its own. It records the first's
// outcome as check.KindLateEmit and returns the rows committed.
func (w *world) emitAfter(ctx context.Context, late *pgx.Conn, lateTx pgx.Tx, n int) []check.Row {
	var rows []check.Row
	emit := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, which string) (check.Row, error) {
		agg := fmt.Sprintf("retire%d-%s", n, which)
		r := check.Row{Table: "message:" + messagePrefix, Aggregate: "order/" + agg, Version: 1, Emitted: true, Op: gen.CmdRetireInFlight}
		err := q.QueryRow(ctx, `INSERT INTO `+emitted+` (id) SELECT cdc_router.emit('order', $1, 1, 'created', $2::jsonb, '{}'::jsonb)::text
			RETURNING id`, agg, fmt.Sprintf(`{"token": %q, "v": 1}`, w.token)).Scan(&r.ID)
		return r, err
	}
	committed := func(r check.Row, c *pgx.Conn, err error) {
		var after cdc.LSN
		if err == nil {
			var s string
			if c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s) == nil {
				after, _ = cdc.ParseLSN(s)
			}
		}
		r.Committed, r.LSNAfter, r.Unknown = time.Now(), after, err != nil
		rows = append(rows, r)
	}
	from := time.Now()
	r, err := emit(lateTx, "late")
	if err != nil {
		lateTx.Rollback(ctx)
		w.rec.Event(check.Event{From: from, To: time.Now(), Kind: check.KindLateEmit, Note: "failed: " + check.Trim(err.Error(), 300)})
	} else {
		err = lateTx.Commit(ctx)
		committed(r, late, err)
		note := "committed"
		if err != nil {
			note = "commit failed: " + check.Trim(err.Error(), 300)
		}
		w.rec.Event(check.Event{From: from, To: time.Now(), Kind: check.KindLateEmit, Note: note, IDs: []string{r.ID}})
	}
	c, err := pgx.Connect(ctx, w.roleURL(w.writerRole()))
	if err != nil {
		return rows
	}
	defer c.Close(ctx)
	if r, err := emit(c, "after"); err == nil {
		committed(r, c, nil)
	}
	return rows
}
