package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// Events the broker refuses one message at a time (issue 19, findings 5, 6, 7 and 10): whether the stream,
// the initial snapshot or a backfill publishes them, they are retried alone a bounded number of times (a
// return or a nack: for --refusal-retry), then quarantined with the broker's reason, and the rest goes on.

// insertDbz inserts one row of the Debezium-shaped table per (aggregatetype, aggregateid) pair and returns
// their ids in order.
func (e *env) insertDbz(pairs ...string) []string {
	e.t.Helper()
	var ids []string
	for i := 0; i+1 < len(pairs); i += 2 {
		id := uuid()
		e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, 'Changed', '{}')`,
			id, pairs[i], pairs[i+1])
		ids = append(ids, id)
	}
	return ids
}

// firstDeliveries waits until every id of want was delivered at least once and returns the message ids in
// the order of their first delivery, and how often each was delivered.
func firstDeliveries(t testing.TB, c *consumer, want []string, timeout time.Duration) ([]string, map[string]int) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var first []string
		n := map[string]int{}
		for _, d := range c.snapshot() {
			if n[d.msg.MessageId]++; n[d.msg.MessageId] == 1 {
				first = append(first, d.msg.MessageId)
			}
		}
		missing := 0
		for _, id := range want {
			if n[id] == 0 {
				missing++
			}
		}
		if missing == 0 {
			return first, n
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events not delivered within %v (delivered: %v)", missing, len(want), timeout, first)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// atMostTwice checks, a second after every id of want was delivered, that none was delivered more than
// twice (once before the broker's first refusal of another event, once after that event's quarantine); it
// returns the delivery counts.
func atMostTwice(t testing.TB, c *consumer, want []string) map[string]int {
	t.Helper()
	time.Sleep(time.Second) // a late duplicate would arrive now
	_, n := firstDeliveries(t, c, want, time.Second)
	for _, id := range want {
		if n[id] > 2 {
			t.Errorf("event %s delivered %d times, want at most 2", id, n[id])
		}
	}
	return n
}

// subsequence reports whether the ids of want appear in got in want's order.
func subsequence(got, want []string) bool {
	i := 0
	for _, id := range got {
		if i < len(want) && id == want[i] {
			i++
		}
	}
	return i == len(want)
}

// quarantinedFor waits for exactly the one record of id and checks its reason holds each of parts.
func (e *env) quarantinedFor(id string, timeout time.Duration, parts ...string) string {
	e.t.Helper()
	q := e.waitQuarantined(1, timeout)
	reason, ok := q[id]
	if !ok {
		e.t.Fatalf("quarantined %v, want only %s", q, id)
	}
	for _, p := range parts {
		if !strings.Contains(reason, p) {
			e.t.Errorf("quarantine reason %q, want it to contain %q", reason, p)
		}
	}
	return reason
}

// TestSnapshotRowTheBrokerRefusesIsQuarantined (finding 5): a row of the initial snapshot that its own
// exchange returns (nothing bound for its key) used to restart the snapshot forever, republishing its
// neighbours, until the start-up grace ended the process. Now the snapshot takes a new connection,
// publishes the rows after its last confirmed one alone, quarantines the refused row after --refusal-retry
// with the broker's reason, finishes, and the stream takes over.
func TestSnapshotRowTheBrokerRefusesIsQuarantined(t *testing.T) {
	e, orders, config := perTopicExchanges(t, "o-1")
	rows := e.insertDbz("Order", "o-1", "Order", "o-1", "Order", "o-unbound", "Order", "o-1", "Order", "o-1")
	c := e.consume(e.queue)
	r := e.startMapped("dbz_outbox", config, "--snapshot", "initial", "--refusal-retry", "1s")
	later := e.insertDbz("Order", "o-1")
	// A mapped table's snapshot reads in primary-key order (random uuids here): check delivery, not order.
	good := append(append([]string{}, rows[0], rows[1], rows[3], rows[4]), later...)
	firstDeliveries(t, c, good, 30*time.Second)
	e.quarantinedFor(rows[2], 10*time.Second, `routing key "o-unbound"`, fmt.Sprintf("exchange %q", orders), "only message in flight")
	atMostTwice(t, c, good)
	if !strings.Contains(r.Output(), "RabbitMQ refused a row") || strings.Contains(r.Output(), "restarting from the acknowledged position") {
		t.Errorf("the snapshot's safety net did not act, or the stream restarted:\n%s", tail(r.Output(), 20))
	}
}

// TestSnapshotRowANackRefusesIsQuarantined (finding 5, the native shape, read in key order): a queue with
// x-max-length-bytes and x-overflow=reject-publish nacks one row of the initial snapshot, too large for it,
// at every try. The row is quarantined after --refusal-retry, every other row reaches the queues at most
// twice and each aggregate's rows first arrive in version order.
func TestSnapshotRowANackRefusesIsQuarantined(t *testing.T) {
	e := newStreamEnv(t)
	e.smallQueue(2000)
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'order', a, v, 'changed', '{}' FROM unnest(ARRAY['a', 'c']) a, generate_series(1, 3) v`)
	var big string
	if err := e.db.QueryRow(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id,
		aggregate_version, event_type, payload) VALUES (gen_random_uuid(), 'order', 'b', 1, 'created',
		jsonb_build_object('x', repeat('x', 5000))) RETURNING id::text`).Scan(&big); err != nil {
		t.Fatal(err)
	}
	want := e.ids(`SELECT id::text FROM outbox WHERE id <> $1 ORDER BY aggregate_id, aggregate_version`, big)
	e.snapshotNackIsQuarantined(big, want)
}

// smallQueue declares a queue of the test bound to every key of its exchange that nacks (x-overflow=
// reject-publish) a message of more than max bytes, even while empty; it is deleted at cleanup.
func (e *env) smallQueue(max int) string {
	e.t.Helper()
	ch := e.channel()
	small := e.queue + "_small"
	if _, err := ch.QueueDeclare(small, false, false, false, false, amqp.Table{"x-max-length-bytes": int32(max),
		"x-overflow": "reject-publish"}); err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _, _ = e.channel().QueueDelete(small, false, false, false) })
	if err := ch.QueueBind(small, "#", e.exchange, false, nil); err != nil {
		e.t.Fatal(err)
	}
	return small
}

// TestBackfillRowTheBrokerRefusesIsQuarantined (finding 5): the same for `backfill`, which used to fail
// the job at the refused row at every run.
func TestBackfillRowTheBrokerRefusesIsQuarantined(t *testing.T) {
	e, orders, config := perTopicExchanges(t, "o-1")
	rows := e.insertDbz("Order", "o-1", "Order", "o-unbound", "Order", "o-1", "Order", "o-1")
	c := e.consume(e.queue)
	out, code := e.cli("backfill", "--table", "public.dbz_outbox", "--config", config, "--exchange", e.exchange,
		"--where", "true", "--refusal-retry", "1s")
	if code != 0 {
		t.Fatalf("backfill: exit %d:\n%s", code, tail(out, 20))
	}
	good := []string{rows[0], rows[2], rows[3]}
	firstDeliveries(t, c, good, 10*time.Second) // in primary-key order: random uuids
	e.quarantinedFor(rows[1], 5*time.Second, `routing key "o-unbound"`, fmt.Sprintf("exchange %q", orders))
	atMostTwice(t, c, good)
	if !strings.Contains(out, "RabbitMQ refused a row") {
		t.Errorf("the backfill's safety net did not act:\n%s", tail(out, 20))
	}
}

// TestNackThatCanNeverSucceedIsQuarantined (finding 6): a queue with x-max-length-bytes and
// x-overflow=reject-publish nacks an event larger than it allows, even while empty. It used to restart the
// stream without end, republishing the unacknowledged suffix to every other queue each time. Now the nack
// is that event's refusal: it is retried alone for --refusal-retry, then quarantined with the cause, and
// every later event reaches the other queue at most twice (once before the first nack, once after the
// quarantine).
func TestNackThatCanNeverSucceedIsQuarantined(t *testing.T) {
	e := newStreamEnv(t)
	e.smallQueue(2000)
	c := e.consume(e.queue)
	r := e.startStreaming("--refusal-retry", "2s")
	var big string
	if err := e.db.QueryRow(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id,
		aggregate_version, event_type, payload) VALUES (gen_random_uuid(), 'order', 'big', 1, 'created',
		jsonb_build_object('x', repeat('x', 5000))) RETURNING id::text`).Scan(&big); err != nil {
		t.Fatal(err)
	}
	w := newWriter(t, e.pgURL, 2)
	w.write(10, 5, 0)
	var want []string
	for _, row := range w.rows {
		want = append(want, row.id)
	}
	e.quarantinedFor(big, 60*time.Second, "nacked", "x-max-length-bytes", "only message in flight")
	firstDeliveries(t, c, want, 30*time.Second)
	n := atMostTwice(t, c, want)
	t.Logf("the oversized event reached the other queue %d times before its quarantine; %d stream restarts", n[big],
		strings.Count(r.Output(), "restarting from the acknowledged position"))
}

// TestWriteRefusedExchangeIsQuarantined (finding 7): a user without write permission on one exchange of
// amqp.topic.target=exchange gets a 403 ACCESS_REFUSED channel close for each event routed there, which
// used to count as transient and restart the router forever. Now it is that event's refusal: retried alone
// for --refusal-retry (a permission may be granted meanwhile, issue 36), then quarantined with the
// permission to grant, and the events of the other exchange flow on.
func TestWriteRefusedExchangeIsQuarantined(t *testing.T) {
	e, _, config := perTopicExchanges(t, "o-1")
	customers := e.exchange + ".Customer"
	ch := e.channel()
	if err := ch.ExchangeDeclare(customers, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.channel().ExchangeDelete(customers, false, false) })
	if err := ch.QueueBind(e.queue, "c-1", customers, false, nil); err != nil {
		t.Fatal(err)
	}
	url := testenv.RabbitMQUser(t, "^(?!"+regexp.QuoteMeta(customers)+"$).*")
	c := e.consume(e.queue)
	r := e.start(url, "--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--config", config, "--snapshot", "never",
		"--refusal-retry", "1s")
	r.waitLog("msg=streaming ", 30*time.Second)
	rows := e.insertDbz("Order", "o-1", "Order", "o-1", "Customer", "c-1", "Order", "o-1", "Order", "o-1")
	want := []string{rows[0], rows[1], rows[3], rows[4]}
	first, _ := firstDeliveries(t, c, want, 30*time.Second)
	if !subsequence(first, want) {
		t.Errorf("first deliveries %v, want %v in that order", first, want)
	}
	e.quarantinedFor(rows[2], 30*time.Second, "403", fmt.Sprintf("exchange %q", customers), "set_permissions", "retried")
}

// TestBriefUnboundExchangeDelaysButKeepsTheEvent (finding 10): an exchange of amqp.topic.target=exchange
// with nothing bound for an event's key for about 3 s (a consumer restarting with an auto-delete queue)
// used to get the event quarantined after four returns in a second, and its next version delivered first.
// Now returns are retried with backoff for --refusal-retry (default minutes): the event is delivered, not
// quarantined, and before the next version; meanwhile /readyz is 503 and names the exchange.
func TestBriefUnboundExchangeDelaysButKeepsTheEvent(t *testing.T) {
	e, orders, config := perTopicExchanges(t)
	c := e.consume(e.queue)
	addr := freeAddr(t)
	r := e.startMapped("dbz_outbox", config, "--http-addr", addr)
	rows := e.insertDbz("Order", "o-1", "Order", "o-1")
	r.waitLog("NO_ROUTE", 20*time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := get(t, "http://"+addr+"/readyz")
		if code == 503 && strings.Contains(body, orders) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz = %d %s, want 503 naming exchange %s", code, body, orders)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(3 * time.Second)
	if err := e.channel().QueueBind(e.queue, "o-1", orders, false, nil); err != nil {
		t.Fatal(err)
	}
	first, _ := firstDeliveries(t, c, rows, 60*time.Second)
	if strings.Join(first, " ") != strings.Join(rows, " ") {
		t.Errorf("first deliveries %v, want %v", first, rows)
	}
	if n := e.quarantined(); n != "0" {
		t.Errorf("%s events quarantined, want none", n)
	}
}

// TestMergedSnapshotRowANackRefusesIsQuarantined: the initial snapshot of two tables, copied merged in
// aggregate order, has the copy's safety net too: a row of the second table that a queue nacks is isolated
// and quarantined, and every other row of both tables arrives with each aggregate's versions in order across
// the tables. (Before, the merged copy failed at the refused row and the snapshot started again, forever.)
func TestMergedSnapshotRowANackRefusesIsQuarantined(t *testing.T) {
	e := twoOutboxes(t, true)
	e.smallQueue(2000)
	for _, r := range []struct {
		table, agg string
		v          int
	}{{"outbox", "a", 1}, {"outbox_b", "a", 2}, {"outbox", "a", 3}, {"outbox_b", "c", 1}, {"outbox", "c", 2}, {"outbox_b", "c", 3}} {
		e.exec(`INSERT INTO `+r.table+` (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			VALUES (gen_random_uuid(), 'order', $1, $2, 'changed', '{}')`, r.agg, r.v)
	}
	var big string
	if err := e.db.QueryRow(context.Background(), `INSERT INTO outbox_b (id, aggregate_type, aggregate_id,
		aggregate_version, event_type, payload) VALUES (gen_random_uuid(), 'order', 'b', 1, 'created',
		jsonb_build_object('x', repeat('x', 5000))) RETURNING id::text`).Scan(&big); err != nil {
		t.Fatal(err)
	}
	want := e.ids(`SELECT id::text FROM (SELECT * FROM outbox UNION ALL SELECT * FROM outbox_b) o
		WHERE id <> $1 ORDER BY aggregate_id, aggregate_version`, big)
	e.snapshotNackIsQuarantined(big, want, "--table", "outbox", "--table", "outbox_b")
}

// ids is the first column of the rows of query, in their order.
func (e *env) ids(query string, args ...any) []string {
	e.t.Helper()
	rows, err := e.db.Query(context.Background(), query, args...)
	if err != nil {
		e.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// snapshotNackIsQuarantined starts the router (with flags) on an initial snapshot whose row big a queue
// nacks, and checks that big is quarantined, that every row of want (two aggregates of three rows, in
// version order) arrives at most twice with each aggregate's first deliveries in order, and that the
// snapshot's safety net acted.
func (e *env) snapshotNackIsQuarantined(big string, want []string, flags ...string) {
	t := e.t
	t.Helper()
	c := e.consume(e.queue)
	r := e.startStreaming(append(flags, "--refusal-retry", "1s")...)
	first, _ := firstDeliveries(t, c, want, 30*time.Second)
	if !subsequence(first, want[:3]) || !subsequence(first, want[3:]) {
		t.Errorf("first deliveries %v, want each aggregate's rows in version order: %v", first, want)
	}
	e.quarantinedFor(big, 10*time.Second, "nacked", "x-max-length-bytes", "only message in flight")
	atMostTwice(t, c, want)
	if !strings.Contains(r.Output(), "RabbitMQ refused a row") {
		t.Errorf("the snapshot's safety net did not act:\n%s", tail(r.Output(), 20))
	}
}

// TestRefusalRetriesKeepTheConfirmedTransactionBeforeIt (chaos seed 9405): a long one-aggregate transaction,
// then an event a queue refuses every time. Each retry publishes one event at a time, so the refused event
// goes out just after the long transaction's last confirm, before the batched status update acknowledged
// it; the next retry then started before the transaction again (its progress mark ended with it) and
// published it whole, once per retry: 20,514 events each time in the seed, the events after it held for
// minutes. Now a failed session acknowledges what was confirmed first: the transaction is published once
// (twice at most for an event in flight at the first refusal), and the refused event is quarantined.
func TestRefusalRetriesKeepTheConfirmedTransactionBeforeIt(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming("--refusal-retry", "3s")
	ch := e.channel()
	full := e.queue + "_full"
	if _, err := ch.QueueDeclare(full, false, false, false, false, amqp.Table{"x-max-length": int32(0),
		"x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = e.channel().QueueDelete(full, false, false, false) })
	if err := ch.QueueBind(full, "order.refused", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	const n = 4000
	ctx := context.Background()
	var long []string
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version,
			event_type, payload) SELECT gen_random_uuid(), 'order', 'hot', v, 'created', '{}' FROM generate_series(1, $1) v
			RETURNING id::text`, n)
		if err != nil {
			return err
		}
		long, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	var refused string
	if err := e.db.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version,
		event_type, payload) VALUES (gen_random_uuid(), 'order', 'other', 1, 'refused', '{}') RETURNING id::text`).Scan(&refused); err != nil {
		t.Fatal(err)
	}
	e.quarantinedFor(refused, 120*time.Second, "nacked", "only message in flight")
	_, got := firstDeliveries(t, c, long, 30*time.Second)
	total, twice := 0, 0
	for _, id := range long {
		total += got[id]
		if got[id] > 2 {
			t.Errorf("event %s of the long transaction delivered %d times, want at most 2", id, got[id])
			break
		}
		if got[id] == 2 {
			twice++
		}
	}
	restarts := strings.Count(r.Output(), "restarting from the acknowledged position")
	t.Logf("the long transaction's %d events: %d deliveries (%d twice); %d stream restarts before the quarantine", n, total, twice, restarts)
	if restarts < 3 {
		t.Errorf("%d stream restarts: the refused event was not retried as the test means it to be", restarts)
	}
}
