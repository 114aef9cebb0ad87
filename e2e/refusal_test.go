package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// runOnceAndStop starts the router, writes one event, waits for it and stops the router gracefully.
func (e *env) runOnceAndStop(c *consumer, w *writer) {
	e.t.Helper()
	r := e.startStreaming()
	w.write(1, 1, 0)
	c.waitFor(e.t, w.rows, 20*time.Second)
	r.signal(syscall.SIGTERM)
	if code := r.wait(30 * time.Second); code != 0 {
		e.t.Fatalf("exit %d", code)
	}
}

// expectRefusal starts the router and expects it to exit non-zero within seconds with want in its output.
func (e *env) expectRefusal(want string) {
	e.t.Helper()
	began := time.Now()
	r := e.start("")
	code := r.wait(15 * time.Second)
	if code == 0 || !strings.Contains(r.Output(), want) {
		e.t.Fatalf("exit %d, output:\n%s\nwant a non-zero exit with %q", code, tail(r.Output(), 10), want)
	}
	e.t.Logf("refused in %v: %s", time.Since(began).Round(time.Millisecond), tail(strings.TrimSpace(r.Output()), 1))
}

// dropReleasedSlot drops the env's slot once the walsender of the router that exited has released it: the
// server ends that walsender a moment after the router's exit (longer under load, 55006 meanwhile).
func (e *env) dropReleasedSlot() {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := e.db.Exec(context.Background(), `SELECT pg_drop_replication_slot($1)`, e.slot)
		if err == nil {
			return
		}
		if time.Now().After(deadline) || !strings.Contains(err.Error(), "55006") {
			e.t.Fatalf("drop slot %s: %v", e.slot, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSlotDroppedWhileStoppedIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	e.runOnceAndStop(e.consume(e.queue), newWriter(t, e.pgURL, 1))
	e.dropReleasedSlot()
	e.expectRefusal("does not exist but a position")
	if n := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot); n != "0" {
		t.Fatalf("the refusing router created a slot anyway")
	}
}

func TestPositionFromAnotherClusterIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	e.runOnceAndStop(e.consume(e.queue), newWriter(t, e.pgURL, 1))
	e.exec(`UPDATE cdc_router.positions SET system_id = '7000000000000000001'`)
	e.expectRefusal("written by PostgreSQL cluster 7000000000000000001")
}

// TestResetAfterRefusalStartsOver: the command the refusal names works.
func TestResetAfterRefusalStartsOver(t *testing.T) {
	e := newStreamEnv(t)
	c, w := e.consume(e.queue), newWriter(t, e.pgURL, 1)
	e.runOnceAndStop(c, w)
	e.dropReleasedSlot()
	out, code := e.cli("reset", "--slot", e.slot)
	if code != 0 {
		t.Fatalf("reset: exit %d: %s", code, out)
	}
	e.runOnceAndStop(c, w)
}

// TestUnroutableEventIsParked: with the alternate exchange an event that matches no binding lands in
// <exchange>.unroutable and the stream goes on.
func TestUnroutableEventIsParked(t *testing.T) {
	e := newEnv(t)
	e.declare(true, "order.*")
	c := e.consume(e.queue)
	e.startStreaming()
	park := e.consume(e.exchange + ".unroutable")
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'invoice', 'i-1', 1, 'issued', '{}')`)
	w := newWriter(t, e.pgURL, 3)
	w.write(10, 5, 0)
	c.waitFor(t, w.rows, 20*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for len(park.snapshot()) == 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	got := park.snapshot()
	if len(got) != 1 || got[0].msg.RoutingKey != "invoice.issued" {
		t.Fatalf("unroutable queue got %d messages, want the invoice.issued event", len(got))
	}
}

// TestReturnedEventHoldsThePositionUntilABindingAppears: without an alternate exchange an unroutable
// event is returned, retried with backoff, and not acknowledged to PostgreSQL until it can be routed.
func TestReturnedEventHoldsThePositionUntilABindingAppears(t *testing.T) {
	e := newEnv(t)
	e.declare(false, "order.*")
	c := e.consume(e.queue)
	r := e.startStreaming("--no-alternate-exchange")
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'invoice', 'i-1', 1, 'issued', '{}')`)
	after, _ := cdc.ParseLSN(e.scalar(`SELECT pg_current_wal_lsn()::text`))
	w := newWriter(t, e.pgURL, 3)
	w.write(10, 5, 0)
	time.Sleep(4 * time.Second)
	if acked := e.ackedPosition(); acked >= after {
		t.Fatalf("acknowledged %v, past the returned event (its commit ends before %v)", acked, after)
	}
	r.waitLog("NO_ROUTE", 5*time.Second)
	ch := e.channel()
	q, err := ch.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q.Name, "invoice.#", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	deliveries, _ := ch.Consume(q.Name, "", true, true, false, false, nil)
	select {
	case d := <-deliveries:
		if d.RoutingKey != "invoice.issued" {
			t.Fatalf("got %s", d.RoutingKey)
		}
	case <-time.After(45 * time.Second):
		t.Fatal("the returned event was not published again after a binding appeared")
	}
	c.waitFor(t, w.rows, 30*time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for e.ackedPosition() < after {
		if time.Now().After(deadline) {
			t.Fatalf("position %v never passed the event (%v) after it was routed", e.ackedPosition(), after)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestIdleOutboxStillAdvancesTheSlot: writes to other tables move confirmed_flush_lsn, so an idle outbox
// does not pin WAL.
func TestIdleOutboxStillAdvancesTheSlot(t *testing.T) {
	e := newStreamEnv(t)
	e.startStreaming()
	time.Sleep(time.Second)
	before := e.ackedPosition()
	for i := 0; i < 50; i++ {
		e.exec(`INSERT INTO other (note) VALUES ('busy elsewhere')`)
	}
	target, _ := cdc.ParseLSN(e.scalar(`SELECT pg_current_wal_lsn()::text`))
	deadline := time.Now().Add(30 * time.Second)
	for {
		flush, _ := cdc.ParseLSN(e.scalar(`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot))
		if flush >= target {
			t.Logf("confirmed_flush_lsn moved from %v to %v with no outbox traffic", before, flush)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("confirmed_flush_lsn %v did not reach %v (started at %v)", flush, target, before)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestMalformedRowIsQuarantinedAndTheStreamGoesOn.
func TestMalformedRowIsQuarantinedAndTheStreamGoesOn(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming("--max-payload-bytes", "1000")
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES (gen_random_uuid(), 'order', 'bad-1', 1, 'created', '{}', '[1, 2]')`)
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'bad-2', 1, 'created', jsonb_build_object('big', repeat('x', 2000)))`)
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	got := c.waitFor(t, w.rows, 30*time.Second)
	if len(got) != 20 {
		t.Errorf("%d deliveries, want the 20 good events", len(got))
	}
	rows, err := e.db.Query(context.Background(), `SELECT row_values->>'aggregate_id', reason FROM cdc_router.quarantine ORDER BY lsn`)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for rows.Next() {
		var id, reason string
		rows.Scan(&id, &reason)
		reasons = append(reasons, id+": "+reason)
	}
	if len(reasons) != 2 || !strings.Contains(reasons[0], "bad-1") || !strings.Contains(reasons[1], "bad-2") {
		t.Fatalf("quarantine = %q, want bad-1 and bad-2 with reasons", reasons)
	}
	t.Logf("quarantined: %q", reasons)
	if strings.Contains(r.Output(), "xxxxxxxxxx") {
		t.Error("the log carries a payload")
	}
	out, _ := e.cli("status", "--slot", e.slot)
	if !strings.Contains(out, "quarantined rows: 2") || !strings.Contains(out, "slot active:      yes") {
		t.Errorf("status:\n%s", out)
	}
}

// TestSlotCreationNamesTheTransactionItWaitsFor: an open transaction holds slot creation; the router says
// which session it waits for (pid and xid) in the log and in /readyz's problem, says it again later for as
// long as it waits, and goes on once the transaction ends.
func TestSlotCreationNamesTheTransactionItWaitsFor(t *testing.T) {
	e := newStreamEnv(t)
	ctx := context.Background()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO other (note) VALUES ('holding an xid')`); err != nil {
		t.Fatal(err)
	}
	var pid int
	var xid string
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid(), pg_current_xact_id()::text`).Scan(&pid, &xid); err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	r := e.start("", "--http-addr", addr)
	r.waitLog("slot creation waits for", 30*time.Second)
	if line := r.Output()[strings.Index(r.Output(), "slot creation waits for"):]; !strings.Contains(line[:strings.IndexByte(line, '\n')],
		fmt.Sprintf("pid=%d xid=%s", pid, xid)) {
		t.Errorf("the log line does not name pid %d and xid %s: %s", pid, xid, line[:strings.IndexByte(line, '\n')])
	}
	code, body := get(t, "http://"+addr+"/readyz")
	if code != 503 || !strings.Contains(body, "to create replication slot "+e.slot) || !strings.Contains(body, fmt.Sprintf("pid %d (xid %s", pid, xid)) {
		t.Errorf("/readyz = %d %s while slot creation waits, want 503 naming the wait and pid %d, xid %s", code, body, pid, xid)
	}
	deadline := time.Now().Add(40 * time.Second)
	for strings.Count(r.Output(), "slot creation waits for") < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("slot creation waits, but the router said so only once:\n%s", tail(r.Output(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	tx.Commit(ctx)
	r.waitLog("msg=streaming ", 30*time.Second)
	if code, body := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Errorf("/readyz = %d %s once streaming", code, body)
	}
}

// TestSecondRouterWaitsForTheFirst: a second router on the same slot publishes nothing while the first runs
// (also during its snapshot), and takes over when the first stops.
func TestSecondRouterWaitsForTheFirst(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 10)
	w.prefill(50_000, "")
	first := e.start("")
	first.waitLog("initial snapshot", 30*time.Second)
	second := e.start("")
	second.waitLog("another router holds slot", 30*time.Second)
	first.waitLog("msg=streaming ", 120*time.Second)
	w.write(100, 10, 0)
	c.waitFor(t, w.rows, 60*time.Second)
	first.signal(syscall.SIGTERM)
	first.wait(30 * time.Second)
	second.waitLog("msg=streaming ", 60*time.Second)
	w.write(100, 10, 0)
	got := c.waitFor(t, w.rows, 60*time.Second)
	if dups, _ := duplicates(got); dups != 0 {
		t.Errorf("%d duplicates with two routers on one slot", dups)
	}
}
