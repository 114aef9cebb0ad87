package e2e

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// checkEffectivelyOnce asserts the end state against the source of truth, the accounts table.
func checkEffectivelyOnce(t *testing.T, db *pgx.Conn, published int64, begun time.Time) {
	t.Helper()
	c := effectivelyOnceConsumer
	window := begun.Add(-time.Minute)
	for _, check := range []struct {
		what, sql string
		args      []any
	}{
		{"accounts whose ledger does not add up to their balance and version", `SELECT count(*) FROM accounts a
			LEFT JOIN (SELECT account_id, sum(amount) AS s, count(*) AS n FROM ledger GROUP BY 1) l ON l.account_id = a.id
			WHERE a.balance <> coalesce(l.s, 0) OR a.version <> coalesce(l.n, 0)`, nil},
		{"accounts whose projected balance or version differs from the accounts table", `SELECT count(*) FROM accounts a
			FULL JOIN (SELECT * FROM account_projection WHERE consumer = $1) p ON p.id = a.id
			WHERE a.id IS NULL OR a.balance <> coalesce(p.balance, 0) OR a.version <> coalesce(p.version, 0)`, []any{c}},
		{"outbox events without exactly one applied inbox record, or inbox records without an event", `SELECT count(*)
			FROM outbox e FULL JOIN (SELECT * FROM inbox.inbox WHERE consumer = $1) i ON i.event_id = e.id::text
			WHERE e.id IS NULL OR i.event_id IS NULL OR i.status <> 'applied'`, []any{c}},
		{"outbox events not applied exactly once by the handler (apply_counter)", `SELECT count(*)
			FROM outbox e FULL JOIN (SELECT * FROM apply_counter WHERE consumer = $1) a ON a.event_id = e.id::text
			WHERE e.id IS NULL OR a.event_id IS NULL OR a.count <> 1`, []any{c}},
		{"parked events", `SELECT count(*) FROM inbox.parked WHERE consumer = $1`, []any{c}},
		{"failed events", `SELECT count(*) FROM inbox.failed WHERE consumer = $1`, []any{c}},
		{"attempt counts left behind (a success clears them)", `SELECT count(*) FROM inbox.attempts WHERE consumer = $1`, []any{c}},
		{"quarantined outbox rows", `SELECT count(*) FROM cdc_router.quarantine`, nil},
		// The reconciliation queries of docs/producers.md, over the whole run.
		{"accounts changed without an event at their version", `SELECT count(*) FROM (SELECT a.id, a.version
			FROM accounts a
			LEFT JOIN outbox e ON e.aggregate_type = 'account' AND e.aggregate_id = a.id
			                  AND e.aggregate_version = a.version
			WHERE a.version > 0
			  AND e.id IS NULL) q`, nil},
		{"events published but not applied", `SELECT count(*) FROM (SELECT e.id, e.aggregate_type, e.aggregate_id, e.aggregate_version, i.status
			FROM outbox e
			LEFT JOIN inbox.inbox i ON i.consumer = $1 AND i.event_id = e.id::text
			WHERE e.occurred_at >= $2 AND e.occurred_at < now()
			  AND e.aggregate_type = 'account'
			  AND (i.event_id IS NULL OR i.status = 'parked')) q`, []any{c, window}},
		{"events applied but unknown to the outbox", `SELECT count(*) FROM (SELECT i.event_id, i.aggregate_type, i.aggregate_id, i.aggregate_version, i.received_at
			FROM inbox.inbox i
			LEFT JOIN outbox e ON e.id::text = i.event_id
			WHERE i.consumer = $1
			  AND i.received_at >= $2 AND i.received_at < now()
			  AND e.id IS NULL) q`, []any{c, window}},
	} {
		if n := number(t, db, check.sql, check.args...); n != 0 {
			t.Errorf("%d %s", n, check.what)
		}
	}
	if n := number(t, db, `SELECT count(*) FROM inbox.inbox WHERE consumer = $1 AND status = 'applied'`, c); n != published {
		t.Errorf("the inbox holds %d applied records for %s, want one per outbox event: %d", n, c, published)
	}
}

// report prints the article's figures: published, deliveries, applied, inbox rows, final amounts.
func (x *accountsWorld) report(published int64) {
	t, db := x.t, x.e.db
	kinds, unparked, deliveries := x.tally.snapshot()
	var withdrawn, deposited, projected, source int64
	db.QueryRow(context.Background(), `SELECT coalesce(sum(amount) FILTER (WHERE amount > 0), 0),
		coalesce(-sum(amount) FILTER (WHERE amount < 0), 0) FROM ledger`).Scan(&deposited, &withdrawn)
	db.QueryRow(context.Background(), `SELECT (SELECT sum(balance) FROM accounts),
		(SELECT coalesce(sum(balance), 0) FROM account_projection WHERE consumer = $1)`, effectivelyOnceConsumer).Scan(&source, &projected)
	w := x.w
	t.Logf("writers: %d changes committed, %d lost races decided again, %d reconnects (last error: %v)",
		w.committed.Load(), w.lostRaces.Load(), w.reconnects.Load(), w.lastError())
	t.Logf("published (outbox rows): %d", published)
	t.Logf("deliveries seen by the projection: %d (applied %d + unparked with them %d, duplicate %d, stale %d, parked %d, failed %d, conflict %d, errors retried %d)",
		deliveries, kinds["applied"], unparked, kinds["duplicate"], kinds["stale"], kinds["parked"], kinds["failed"], kinds["conflict"], kinds["error"])
	t.Logf("applied (apply_counter): %d applications of %d events; inbox rows: %d",
		number(t, db, `SELECT coalesce(sum(count), 0) FROM apply_counter WHERE consumer = $1`, effectivelyOnceConsumer),
		number(t, db, `SELECT count(*) FROM apply_counter WHERE consumer = $1`, effectivelyOnceConsumer),
		number(t, db, `SELECT count(*) FROM inbox.inbox WHERE consumer = $1`, effectivelyOnceConsumer))
	t.Logf("final amounts: accounts %d, projection %d (deposited %d, withdrawn %d); run %.0fs",
		source, projected, deposited, withdrawn, time.Since(x.begun).Seconds())
	if kinds["duplicate"] == 0 {
		t.Errorf("no delivery was a duplicate: the backfill's copies never reached the projection")
	}
}

// checkFaultsArrived looks for evidence in the logs that the faults reached the processes: the router
// restarts its stream after each, and each broker session of an instance begins with "consuming".
func (x *accountsWorld) checkFaultsArrived() {
	for _, f := range []struct {
		who, output, line string
		least             int
	}{
		{"the restarted router (broker restart, PostgreSQL restart)", x.r.Output(), "restarting from the acknowledged position", 2},
		{"instance " + x.a.name + " (broker restart)", x.a.logs.Output(), "inbox runner consuming", 2},
		{"instance " + x.b.name + " (connection cut, broker restart)", x.b.logs.Output(), "inbox runner consuming", 3},
	} {
		n := strings.Count(f.output, f.line)
		x.t.Logf("%s logged %q %d times", f.who, f.line, n)
		if n < f.least {
			x.t.Errorf("%s logged %q %d times, want at least %d: the faults did not reach it", f.who, f.line, n, f.least)
		}
	}
}

// number runs a query of one integer.
func number(t testing.TB, db *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// waitApplied waits until the consumer applied every published event, nothing is parked, the queue is
// empty and the projection reported no outcome for two seconds.
func waitApplied(t *testing.T, e *env, tally *outcomeTally, published int64, timeout time.Duration) {
	t.Helper()
	var applied, parked int64
	var ready, lines, still int
	for deadline := time.Now().Add(timeout); ; time.Sleep(250 * time.Millisecond) {
		applied = number(t, e.db, `SELECT count(*) FROM inbox.inbox WHERE consumer = $1 AND status = 'applied'`, effectivelyOnceConsumer)
		parked = number(t, e.db, `SELECT count(*) FROM inbox.parked WHERE consumer = $1`, effectivelyOnceConsumer)
		ready, _ = queueState(t, e)
		_, _, n := tally.snapshot()
		if n == lines {
			still++
		} else {
			lines, still = n, 0
		}
		if applied == published && parked == 0 && ready == 0 && still >= 8 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %d of %d events applied, %d parked, %d messages ready in the queue", timeout, applied, published, parked, ready)
		}
	}
}

// queueState is the number of ready messages in the projection's queue and its consumers.
func queueState(t testing.TB, e *env) (ready, consumers int) {
	t.Helper()
	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		return -1, 0
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return -1, 0
	}
	q, err := ch.QueueDeclarePassive(e.queue, true, false, false, false, nil)
	if err != nil {
		return -1, 0
	}
	return q.Messages, q.Consumers
}

// waitConsumers waits until the projection's queue has n consumers.
func waitConsumers(t testing.TB, e *env, n int, timeout time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		if _, c := queueState(t, e); c == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the queue %s has no %d consumers after %v", e.queue, n, timeout)
		}
	}
}

func splitAddr(t testing.TB, addr string) (string, int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.Atoi(port)
	if err != nil {
		t.Fatal(err)
	}
	return host, p
}
