package e2e

import (
	"strings"
	"testing"
	"time"
)

// TestInternalExchangeRowIsQuarantined (issue 36, finding 4): with amqp.topic.target=exchange, a row whose
// topic names an internal exchange (amq.rabbitmq.trace exists in every vhost) passes the router's passive
// check, and RabbitMQ closes the channel with 403 ACCESS_REFUSED "cannot publish to internal exchange" on
// its publish. That used to restart the stream forever (44 restarts in 11 minutes, never quarantined, every
// later row waiting): any role that may insert into the mapped table could stop the router. Now it is that
// row's refusal: retried alone, quarantined with the broker's words, and the rows of the other aggregate,
// before and after it, arrive in commit order.
func TestInternalExchangeRowIsQuarantined(t *testing.T) {
	e, orders, _ := perTopicExchanges(t, "o-1")
	config := writeConfig(t, `amqp.topic.target=exchange
route.topic.replacement=${routedByValue}
amqp.routing.key.source=key
`)
	c := e.consume(e.queue)
	r := e.startMapped("dbz_outbox", config, "--refusal-retry", "1s")
	rows := e.insertDbz(orders, "o-1", orders, "o-1", "amq.rabbitmq.trace", "o-1", orders, "o-1", orders, "o-1")
	bad := rows[2]
	e.quarantinedFor(bad, 60*time.Second, "403", "cannot publish to internal exchange 'amq.rabbitmq.trace'",
		"is internal", "only message in flight")
	later := e.insertDbz(orders, "o-1", orders, "o-1")
	want := append([]string{rows[0], rows[1], rows[3], rows[4]}, later...)
	first, _ := firstDeliveries(t, c, want, 30*time.Second)
	if !subsequence(first, want) {
		t.Errorf("first deliveries %v, want %v in that order", first, want)
	}
	atMostTwice(t, c, want)
	restarts := strings.Count(r.Output(), "restarting from the acknowledged position")
	t.Logf("%d stream restarts before the quarantine; reason %q", restarts,
		e.scalar(`SELECT reason FROM cdc_router.quarantine WHERE event_id = $1`, bad))
	if restarts > 10 {
		t.Errorf("%d stream restarts, want the few of the safety net's strikes", restarts)
	}
}

// TestLastingReturnDoesNotRepublishTheAggregateWindow (issue 36, finding 5): with --aggregate-window 4 and
// --no-alternate-exchange, v1 of an aggregate is returned (nothing bound for its routing key) at every try
// for as long as it lasts, while v2 to v8 of the same transaction are routable. Every restart used to write
// v2 to v4 again behind the returned v1 (delivered once per retry, out of order again each time); now they
// reach the queue once before the first return and once after a binding appears, and v5 to v8 once.
func TestLastingReturnDoesNotRepublishTheAggregateWindow(t *testing.T) {
	e := newEnv(t)
	e.declare(false, "order.changed")
	c := e.consume(e.queue)
	r := e.startStreaming("--no-alternate-exchange", "--aggregate-window", "4")
	ids := e.ids(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'order', 'a', v, CASE v WHEN 1 THEN 'lost' ELSE 'changed' END, '{}'
		FROM generate_series(1, 8) v RETURNING id::text`)
	deadline := time.Now().Add(30 * time.Second)
	for strings.Count(r.Output(), "restarting from the acknowledged position") < 5 {
		if time.Now().After(deadline) {
			t.Fatalf("fewer than 5 restarts on the returned v1 within 30 s:\n%s", tail(r.Output(), 20))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := e.channel().QueueBind(e.queue, "order.lost", e.exchange, false, nil); err != nil { // the refusal ends
		t.Fatal(err)
	}
	firstDeliveries(t, c, ids, 60*time.Second)
	time.Sleep(time.Second) // a late duplicate would arrive now
	_, n := firstDeliveries(t, c, ids, time.Second)
	restarts := strings.Count(r.Output(), "restarting from the acknowledged position")
	for v, id := range ids {
		want := 1
		if v > 0 && v < 4 {
			want = 2 // written behind v1 before its first return, and again once it was routed
		}
		if n[id] > want {
			t.Errorf("v%d delivered %d times over %d restarts, want at most %d", v+1, n[id], restarts, want)
		}
	}
	var last []string
	for _, d := range c.snapshot()[len(c.snapshot())-len(ids):] {
		last = append(last, d.msg.MessageId)
	}
	if strings.Join(last, " ") != strings.Join(ids, " ") {
		t.Errorf("the deliveries after the binding appeared: %v, want v1 to v8 in order %v", last, ids)
	}
	t.Logf("%d restarts; deliveries per version: %v", restarts, func() []int {
		var out []int
		for _, id := range ids {
			out = append(out, n[id])
		}
		return out
	}())
}
