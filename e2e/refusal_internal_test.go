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
