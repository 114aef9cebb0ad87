package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The publication gap tests: a table that leaves the publication and comes back between two checks (or
// while the router is stopped) used to lose the rows inserted meanwhile without a word. The checks
// compare the membership's identity, so every such gap is logged with its backfill, makes the router
// unready and refuses the next start until that backfill has run.

// gapCheckInterval is the check interval of these tests: well above the 1 s gap, so that the gap falls
// between two checks.
const gapCheckInterval = "4s"

// afterCheck waits for the router's next publication check (a debug line), so that what follows has the
// whole interval before the next one.
func (r *router) afterCheck() {
	r.t.Helper()
	n := strings.Count(r.Output(), "publication checked")
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(r.Output(), "publication checked") == n {
		if time.Now().After(deadline) {
			r.t.Fatalf("no publication check within 30 s:\n%s", tail(r.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publicationGap takes table out of the publication for a second, inserting a row meanwhile, and returns
// that row's id.
func (e *env) publicationGap(table string) string {
	e.t.Helper()
	e.exec(`ALTER PUBLICATION cdc_router_outbox DROP TABLE ` + table)
	id := e.insertOne(table, "in-the-gap")
	time.Sleep(time.Second)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE ` + table)
	return id
}

// backfillArgs are the arguments of the `cdc-router backfill …` that out names last.
func backfillArgs(t testing.TB, out string) []string {
	t.Helper()
	i := strings.LastIndex(out, "`cdc-router backfill ")
	if i < 0 {
		t.Fatalf("no backfill named in:\n%s", tail(out, 5))
	}
	cmd := out[i+len("`cdc-router backfill "):]
	cmd = cmd[:strings.Index(cmd, "`")]
	before, where, ok := strings.Cut(cmd, `--where "`)
	if !ok {
		t.Fatalf("backfill without --where: %q", cmd)
	}
	return append(append([]string{"backfill"}, strings.Fields(before)...), "--where", strings.TrimSuffix(where, `"`))
}

// expectGapRefusal starts the router with flags and wants it refused, naming the backfill of table (and
// the window's upper bound); it returns that backfill's arguments.
func (e *env) expectGapRefusal(table string, flags ...string) []string {
	e.t.Helper()
	began := time.Now()
	r := e.start("", flags...)
	r.expectExit(30*time.Second, "may have been out of publication", table, "`cdc-router backfill ", "age(xmin) > age('")
	e.t.Logf("refused in %v", time.Since(began).Round(time.Millisecond))
	return backfillArgs(e.t, r.Output())
}

// recover runs the backfill the refusal named and wants it to clear the gap.
func (e *env) recover(args []string) {
	e.t.Helper()
	out, code := e.cli(append(args, "--exchange", e.exchange)...)
	if code != 0 || !strings.Contains(out, "is backfilled") {
		e.t.Fatalf("%v: exit %d, want the gap cleared:\n%s", args, code, out)
	}
}

// TestPublicationGapBetweenChecksIsNoticed: a one-table router; the outbox leaves the publication for 1 s
// between two checks. The next check logs the gap with its backfill and /readyz turns 503; the next start
// refuses naming that backfill, which publishes the lost row and lets the router start again.
func TestPublicationGapBetweenChecksIsNoticed(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	addr := freeAddr(t)
	r := e.startStreaming("--http-addr", addr, "--publication-check-interval", gapCheckInterval)
	r.afterCheck()
	lost := e.publicationGap("outbox")
	back := time.Now()
	after := e.insertOne("outbox", "after-the-gap")
	r.waitLog("publication gap: the outbox table public.outbox", 30*time.Second)
	t.Logf("the gap was logged %v after the table was back (check interval %s)", time.Since(back).Round(time.Millisecond),
		gapCheckInterval)
	if code, body := get(t, "http://"+addr+"/readyz"); code != 503 || !strings.Contains(body, "backfill") {
		t.Errorf("/readyz = %d %s, want 503 naming the backfill", code, body)
	}
	c.waitFor(t, []row{{id: after}}, 30*time.Second)
	for _, d := range c.snapshot() {
		if d.id == lost {
			t.Fatal("the row inserted in the gap was streamed: the test made no gap")
		}
	}
	r.signal(syscall.SIGTERM)
	r.wait(30 * time.Second)
	args := e.expectGapRefusal("public.outbox")
	command := "cdc-router " + strings.Join(args, " ")
	slot := e.slot
	if out, code := e.cli("status", "--slot", slot); code != 0 || !strings.Contains(out, "publication gap:  public.outbox") {
		t.Errorf("status while the gap is recorded: exit %d, want a publication gap line:\n%s", code, out)
	}
	out, code := e.cli("status", "--slot", slot, "--json")
	var st struct {
		Gaps []struct{ Table, Where, Backfill string } `json:"publication_gaps"`
	}
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil || len(st.Gaps) != 1 ||
		st.Gaps[0].Table != "public.outbox" || !strings.Contains(command, st.Gaps[0].Where) {
		t.Errorf("status --json while the gap is recorded: exit %d, %v, publication_gaps %+v, want the refusal's "+
			"window (%s):\n%s", code, err, st.Gaps, command, out)
	}
	e.recover(args)
	if out, code := e.cli("status", "--slot", slot); code != 0 || strings.Contains(out, "publication gap") {
		t.Errorf("status after the backfill: exit %d, still a publication gap line:\n%s", code, out)
	}
	c.waitFor(t, []row{{id: lost}}, 30*time.Second)
	r = e.startStreaming("--http-addr", addr)
	if code, body := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s after the backfill, want 200", code, body)
	}
}

// TestPublicationGapOfSecondTableIsNoticed: a two-table router with a writer on the first table; the
// second leaves the publication for 1 s between two checks. The gap is named for that table (--table in
// its backfill), while the first table's rows keep flowing.
func TestPublicationGapOfSecondTableIsNoticed(t *testing.T) {
	e := twoOutboxes(t, true)
	c := e.consume(e.queue)
	tables := []string{"--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never"}
	r := e.startStreaming(append(tables, "--publication-check-interval", gapCheckInterval)...)
	w := newWriter(t, e.pgURL, 3)
	done := make(chan struct{})
	go func() { defer close(done); w.write(40, 2, 50*time.Millisecond) }()
	r.afterCheck()
	lost := e.publicationGap("outbox_b")
	<-done
	r.waitLog("publication gap: the outbox table public.outbox_b", 30*time.Second)
	if strings.Contains(r.Output(), "publication gap: the outbox table public.outbox ") {
		t.Error("a gap was named for public.outbox, which never left the publication")
	}
	c.waitFor(t, w.rows, 30*time.Second)
	r.signal(syscall.SIGTERM)
	r.wait(30 * time.Second)
	args := e.expectGapRefusal("public.outbox_b", tables...)
	if !strings.Contains(strings.Join(args, " "), "--table public.outbox_b") {
		t.Fatalf("the backfill %v does not name --table public.outbox_b", args)
	}
	e.recover(args)
	c.waitFor(t, []row{{id: lost}}, 30*time.Second)
	e.startStreaming(tables...)
}

// TestPublicationGapWhileStoppedIsRefused: the gap happens while the router is stopped; its next start
// compares with what the last run saw, and refuses.
func TestPublicationGapWhileStoppedIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.runOnceAndStop(c, newWriter(t, e.pgURL, 1))
	lost := e.publicationGap("outbox")
	e.recover(e.expectGapRefusal("public.outbox"))
	c.waitFor(t, []row{{id: lost}}, 30*time.Second)
	e.startStreaming()
}

// TestRecreatedPublicationIsRefused: the publication dropped and created again, as migrate creates it, is
// a gap too (rows inserted while it did not exist were never decoded with it).
func TestRecreatedPublicationIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	e.runOnceAndStop(e.consume(e.queue), newWriter(t, e.pgURL, 1))
	e.exec(`DROP PUBLICATION cdc_router_outbox`)
	e.exec(`CREATE PUBLICATION cdc_router_outbox FOR TABLE outbox WITH (publish = 'insert')`)
	e.expectGapRefusal("public.outbox")
}

// TestNoPublicationGapOnRestartOrUnrelatedPublication: an ordinary restart, and a table added to another
// publication, are no gap: the router stays ready and starts again.
func TestNoPublicationGapOnRestartOrUnrelatedPublication(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 1)
	addr := freeAddr(t)
	r := e.startStreaming("--http-addr", addr, "--publication-check-interval", "500ms")
	e.exec(`CREATE PUBLICATION other_pub FOR TABLE other`)
	e.exec(`ALTER PUBLICATION other_pub ADD TABLE outbox`)
	t.Cleanup(func() { e.exec(`DROP PUBLICATION IF EXISTS other_pub`) })
	r.afterCheck()
	r.afterCheck()
	w.write(5, 2, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	if code, body := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s, want 200", code, body)
	}
	r.signal(syscall.SIGTERM)
	r.wait(30 * time.Second)
	r = e.startStreaming("--http-addr", addr)
	w.write(5, 2, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	if strings.Contains(r.Output(), "publication gap") {
		t.Errorf("a gap was named:\n%s", tail(r.Output(), 10))
	}
}

// TestPublicationGapBackfillCoversALongTransaction: a transaction that began before the last check before a
// publication gap inserts a row before the gap, one in it and one after it, and commits only once the
// gap's backfill has started. Its row from the gap is in no window of occurred_at (its transaction's
// start) and in no snapshot the backfill could take before the commit; the stream never decodes it (seed
// 8126 of the harness lost 1,065 rows of such a transaction). A second one begins while the table is added
// back, after the ALTER's transaction took its id and before it commits, and writes into the gap too: its id
// is above every id completed when the next check runs (a snapshot's xmax is not a bound for it). The
// backfill the router names selects the rows by their inserting transaction and waits for both, saying so,
// then publishes their rows from the gap.
func TestPublicationGapBackfillCoversALongTransaction(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming("--publication-check-interval", gapCheckInterval)
	ctx := context.Background()
	writer, err := pgx.Connect(ctx, e.pgURL)
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(ctx)
	tx, err := writer.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	insert := func(aggID string) string {
		id := uuid()
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			VALUES ($1, 'order', $2, 1, 'created', '{"n": 1}')`, id, aggID); err != nil {
			t.Fatal(err)
		}
		return id
	}
	begin := func() (*pgx.Conn, pgx.Tx) {
		conn, err := pgx.Connect(ctx, e.pgURL)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(ctx) })
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return conn, tx
	}
	before := insert("long-before")
	r.afterCheck()
	e.exec(`ALTER PUBLICATION cdc_router_outbox DROP TABLE outbox`)
	inGap := insert("long-in-the-gap")
	time.Sleep(time.Second)
	_, adding := begin()
	if _, err := adding.Exec(ctx, `ALTER PUBLICATION cdc_router_outbox ADD TABLE outbox`); err != nil {
		t.Fatal(err)
	}
	_, late := begin()
	lateID := uuid()
	if _, err := late.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES ($1, 'order', 'late-in-the-gap', 1, 'created', '{"n": 1}')`, lateID); err != nil {
		t.Fatal(err)
	}
	if err := adding.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	after := insert("long-after")
	r.waitLog("publication gap: the outbox table public.outbox", 30*time.Second)
	args := backfillArgs(t, strings.ReplaceAll(r.Output(), `\"`, `"`)) // the log line's quoting
	type result struct {
		out  string
		code int
	}
	done := make(chan result, 1)
	go func() {
		out, code := e.cli(append(args, "--exchange", e.exchange)...)
		done <- result{out, code}
	}()
	select {
	case res := <-done:
		t.Fatalf("%v ended while the transaction that wrote in the gap was still open: exit %d\n%s", args, res.code, res.out)
	case <-time.After(3 * time.Second):
	}
	for _, tx := range []pgx.Tx{tx, late} {
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	var res result
	select {
	case res = <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%v did not end within 60 s of the commit", args)
	}
	if res.code != 0 || !strings.Contains(res.out, "is backfilled") ||
		!strings.Contains(res.out, "waiting for the transactions that may have written public.outbox during the publication gap") {
		t.Fatalf("%v: exit %d, want it to wait for the open transaction and clear the gap:\n%s", args, res.code, res.out)
	}
	c.waitFor(t, []row{{id: before}, {id: inGap}, {id: after}, {id: lateID}}, 30*time.Second)
}
