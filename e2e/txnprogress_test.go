package e2e

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// bigTxnRows is the size of the one-aggregate transaction of the tests below: at one event per confirm
// round trip (ADR 0006) it takes several seconds to drain here, several times the interval between cuts.
const (
	bigTxnRows  = 10000
	cutInterval = 1500 * time.Millisecond
)

// deliveredOnce counts the distinct ids among got, and how many deliveries each version of the one
// aggregate had.
func deliveredOnce(got []delivery) (distinct int, perVersion map[int64]int) {
	perVersion = map[int64]int{}
	seen := map[string]bool{}
	for _, d := range got {
		perVersion[d.version]++
		if !seen[d.id] {
			seen[d.id] = true
			distinct++
		}
	}
	return distinct, perVersion
}

// TestLargeTransactionCompletesUnderRepeatedCuts: one transaction of bigTxnRows events of one aggregate,
// with the router's broker connection cut every cutInterval through a proxy. Before progress inside a transaction was
// kept, every restart published the transaction from its first event and it never completed; now each restart
// goes on after the last confirmed event: every event arrives, in order, with at most a few deliveries more
// than events per cut. A cut comes cutInterval after the last one, once the router delivered something new
// since: each session has to replay and skip what the earlier ones confirmed (PostgreSQL resumes only at a
// transaction's start), which takes longer than cutInterval on a loaded machine once most of the
// transaction is behind; cutting on the clock alone then measures the machine, not the router. The old
// fault still fails: a session that publishes from the first event again delivers something new only after
// publishing again all that the last one did, far more than 5 duplicates per cut.
func TestLargeTransactionCompletesUnderRepeatedCuts(t *testing.T) {
	const limit = 120 * time.Second
	e, c, p, _, w := bigTxnThroughProxy(t)
	cuts, deadline := 0, time.Now().Add(limit)
	next, atCut := time.Now().Add(cutInterval), 0
	for {
		got := c.snapshot()
		distinct, _ := deliveredOnce(got)
		if distinct == bigTxnRows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d cuts in %v: %d of %d events delivered (%d deliveries, %d at the last cut); acknowledged %v",
				cuts, limit, distinct, bigTxnRows, len(got), atCut, e.ackedPosition())
		}
		if time.Now().After(next) && distinct > atCut {
			p.Cut()
			cuts++
			next, atCut = time.Now().Add(cutInterval), distinct
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := c.waitFor(t, w.rows, 30*time.Second)
	checkOrder(t, got)
	dups, _ := duplicates(got)
	t.Logf("%d events, %d cuts, %d deliveries, %d duplicates", bigTxnRows, cuts, len(got), dups)
	// One unconfirmed event per aggregate: a cut can lose the confirm of that one alone; allow a few.
	if limit := 5 * max(cuts, 1); dups > limit {
		t.Fatalf("%d duplicates after %d cuts, want at most %d: confirmed events were published again", dups, cuts, limit)
	}
}

// storedMark is the progress inside a transaction stored with the slot's position (0: none).
func (e *env) storedMark() int {
	e.t.Helper()
	s := e.scalar(`SELECT coalesce(mark_done, 0)::text FROM cdc_router.positions WHERE slot = $1`, e.slot)
	n, _ := strconv.Atoi(s)
	return n
}

// TestSIGKILLInsideLargeTransactionResumesPastConfirmed: the router is killed inside one transaction of
// bigTxnRows events of one aggregate, after it stored progress inside it (its broker connection is stalled
// through a proxy once a tenth was delivered, so that the transaction cannot finish first on a fast machine).
// After a restart every event arrives in order, the events the stored progress covers are never delivered
// again, and the duplicates are at most what was confirmed after that progress was stored.
func TestSIGKILLInsideLargeTransactionResumesPastConfirmed(t *testing.T) {
	killInsideLargeTransaction(t)
}

// TestDriftRuleChangeResumesInsideTheTransaction: the docs' procedure after a drift refusal, start once with
// --on-drift=quarantine, resumes past the stored progress inside the transaction the router stopped in: the
// drift rule decides only whether a drifted insert stops the stream, not which changes are items (seeds
// 197, 8035 and 8049 of the harness published a 25,000-event transaction again from its start).
func TestDriftRuleChangeResumesInsideTheTransaction(t *testing.T) {
	killInsideLargeTransaction(t, "--on-drift", "quarantine")
}

// killInsideLargeTransaction is TestSIGKILLInsideLargeTransactionResumesPastConfirmed, the router started
// again with flags.
func killInsideLargeTransaction(t *testing.T, flags ...string) {
	e, c, p, r, w := bigTxnThroughProxy(t)
	deadline := time.Now().Add(60 * time.Second)
	for len(c.snapshot()) < bigTxnRows/10 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events delivered within 60 s", len(c.snapshot()), bigTxnRows)
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Pause() // confirms stop: the progress stops moving, and is stored within a second
	stable, last := time.Now(), e.storedMark()
	for m := last; m == 0 || time.Since(stable) < 2*time.Second; m = e.storedMark() {
		if m != last {
			stable, last = time.Now(), m
		}
		if time.Now().After(deadline) {
			t.Fatalf("no progress inside the transaction stored within 60 s (%d delivered)", len(c.snapshot()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	mark := e.storedMark()
	if mark >= bigTxnRows {
		t.Fatalf("stored progress %d covers the whole transaction before the kill", mark)
	}
	settled := -1
	for n := len(c.snapshot()); n != settled; n = len(c.snapshot()) { // the queue's backlog reaches the consumer
		settled = n
		time.Sleep(500 * time.Millisecond)
	}
	before := settled
	e.startStreaming(flags...) // straight to the broker
	got := c.waitFor(t, w.rows, 90*time.Second)
	checkOrder(t, got)
	_, perVersion := deliveredOnce(got)
	again := 0
	for v := int64(1); v <= int64(mark); v++ {
		if perVersion[v] != 1 {
			again++
		}
	}
	dups, _ := duplicates(got)
	t.Logf("killed with %d of %d delivered and %d stored as confirmed; %d deliveries in all, %d duplicates",
		before, bigTxnRows, mark, len(got), dups)
	if again > 0 {
		t.Errorf("%d of the %d events stored as confirmed before the kill were delivered again", again, mark)
	}
	if limit := before - mark + 5; dups > limit {
		t.Errorf("%d duplicates, want at most %d (delivered before the kill %d minus stored progress %d, plus a few)",
			dups, limit, before, mark)
	}
}

// TestMixedLargeTransactionResumesPastEveryKindOfItem: one transaction of bigTxnRows/2 items of one
// aggregate, alternating between two outbox tables, with an emitted message every 50 items and a malformed row
// (quarantined) every 70, under a broker cut every second. The progress kept inside the transaction counts
// all of them in stream order: every event arrives, in version order across tables and messages, each malformed
// row is quarantined, and the duplicates stay at a few per cut.
func TestMixedLargeTransactionResumesPastEveryKindOfItem(t *testing.T) {
	const prefix, items = "cdc-router.outbox", bigTxnRows / 2
	e := twoOutboxes(t, true)
	if out, code := e.cli("migrate", "--emit-function"); code != 0 {
		t.Fatalf("migrate --emit-function: exit %d:\n%s", code, out)
	}
	c := e.consume(e.queue)
	p := e.amqpProxy()
	r := e.start("amqp://guest:guest@"+p.Addr+"/", "--table", "outbox", "--table", "outbox_b", "--message-prefix", prefix,
		"--snapshot", "never")
	r.waitLog("msg=streaming ", 30*time.Second)
	e.exec(`DO $$
	BEGIN
		FOR i IN 1..` + strconv.Itoa(items) + ` LOOP
			IF i % 70 = 0 THEN
				INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
				VALUES (md5('bad-' || i)::uuid, 'order', 'bad-' || i, 1, 'created', '{}', '[1, 2]');
			ELSIF i % 45 = 0 THEN -- unsigned: quarantined, aggregated into a burst's record, one item
				PERFORM pg_logical_emit_message(true, '` + prefix + `', '{"id": "unsigned-' || i || '"}');
			ELSIF i % 50 = 0 THEN
				PERFORM cdc_router.emit('order', 'big', i, 'emitted', jsonb_build_object('n', i), '{}'::jsonb);
			ELSIF i % 2 = 0 THEN
				INSERT INTO outbox_b (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
				VALUES (md5('big-' || i)::uuid, 'order', 'big', i, 'created', jsonb_build_object('n', i));
			ELSE
				INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
				VALUES (md5('big-' || i)::uuid, 'order', 'big', i, 'created', jsonb_build_object('n', i));
			END IF;
		END LOOP;
	END $$`)
	want := 0
	for i := 1; i <= items; i++ {
		if i%70 != 0 && i%45 != 0 {
			want++
		}
	}
	const every = time.Second // half as many items as TestLargeTransactionCompletesUnderRepeatedCuts: cut more often
	cuts, deadline, next := 0, time.Now().Add(90*time.Second), time.Now().Add(every)
	for {
		got := c.snapshot()
		versions := map[int64]bool{}
		for _, d := range got {
			if d.aggID == "big" {
				versions[d.version] = true
			}
		}
		if len(versions) == want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %d cuts: %d of %d events delivered (%d deliveries)", cuts, len(versions), want, len(got))
		}
		if time.Now().After(next) {
			p.Cut()
			cuts++
			next = time.Now().Add(every)
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := c.snapshot()
	checkOrder(t, got)
	dups, _ := duplicates(got)
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.quarantine WHERE slot = $1 AND table_name NOT LIKE 'message:%'`,
		e.slot); n != strconv.Itoa(items/70) {
		t.Errorf("%s rows quarantined, want %d", n, items/70)
	}
	// The unsigned messages are aggregated per second into records of bursts: each is an item of the
	// transaction that is resolved only when its record is written, so the progress kept inside the
	// transaction never skips past one whose record was not stored (nor past the events after it).
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.quarantine WHERE slot = $1 AND reason LIKE
		'unauthenticated emitted message: %'`, e.slot); n == "0" {
		t.Errorf("no record of the unsigned messages")
	}
	t.Logf("%d events and %d quarantined rows, %d cuts, %d deliveries, %d duplicates", want, items/70, cuts, len(got), dups)
	if limit := 5 * max(cuts, 1); dups > limit {
		t.Fatalf("%d duplicates after %d cuts, want at most %d", dups, cuts, limit)
	}
}

// bigTxnThroughProxy starts a router whose broker connection goes through a proxy, waits until it streams,
// and commits one transaction of bigTxnRows events of one aggregate.
func bigTxnThroughProxy(t *testing.T) (*env, *consumer, *testenv.Proxy, *router, *writer) {
	t.Helper()
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	p := e.amqpProxy()
	r := e.start("amqp://guest:guest@" + p.Addr + "/")
	r.waitLog("msg=streaming ", 30*time.Second)
	w := newWriter(t, e.pgURL, 1)
	if err := w.txn(bigTxnRows, true); err != nil {
		t.Fatal(err)
	}
	return e, c, p, r, w
}

// amqpProxy is a proxy to the test's RabbitMQ, to stall or cut the router's connection alone.
func (e *env) amqpProxy() *testenv.Proxy {
	return testenv.NewProxy(e.t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
}
