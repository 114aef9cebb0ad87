package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestTopicTargetExchange (amqp.topic.target=exchange, amqp.routing.key.source=key): each row goes to the
// exchange its routed topic names, with its key as the routing key, in commit order per key; a row routed
// to an exchange nobody declared is quarantined with a reason naming "declare exchange X", and the rows
// after it are published (the router neither stalls nor restarts).
func TestTopicTargetExchange(t *testing.T) {
	e, orders, c := exchangePerTopic(t, "o-1", "o-2")
	ctx := context.Background()
	var want []written
	const lost = "c0000000-0000-4000-8000-000000000001"
	for i := range 6 {
		err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
			for _, key := range []string{"o-1", "o-2"} {
				id := uuid()
				if _, err := tx.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
					VALUES ($1, 'Order', $2, 'Changed', '{}')`, id, key); err != nil {
					return err
				}
				want = append(want, written{key, id})
			}
			if i == 2 {
				_, err := tx.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
					VALUES ($1, 'Customer', 'c-1', 'Moved', '{}')`, lost)
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	inCommitOrder(t, c, want)
	for _, d := range c.snapshot() {
		if d.msg.Exchange != orders || (d.msg.RoutingKey != "o-1" && d.msg.RoutingKey != "o-2") {
			t.Errorf("message %s came through exchange %q with routing key %q, want %q and its key", d.msg.MessageId,
				d.msg.Exchange, d.msg.RoutingKey, orders)
		}
	}
	e.waitQuarantined(1, 10*time.Second)
	reason := e.scalar(`SELECT table_name || ': ' || reason FROM cdc_router.quarantine WHERE event_id = $1`, lost)
	if !strings.Contains(reason, fmt.Sprintf("declare exchange %q", e.exchange+".Customer")) || !strings.HasPrefix(reason, "public.dbz_outbox: ") {
		t.Errorf("quarantine of the row routed to a missing exchange: %q", reason)
	}
}

// TestUnroutableOnMappedExchangeIsQuarantined: an exchange named by the routed topic is the operator's, so
// the router cannot give it an alternate exchange. A message it returns as unroutable is refused again
// at every restart; the safety net then quarantines that one event once --refusal-retry (1 s here) has
// passed, naming the exchange and the routing key, and the stream goes on (it must not restart forever
// and pin the WAL).
func TestUnroutableOnMappedExchangeIsQuarantined(t *testing.T) {
	e, orders, c := exchangePerTopic(t, "o-1")
	ctx := context.Background()
	var want []written
	const lost = "c0000000-0000-4000-8000-000000000002"
	for i := range 6 {
		id := uuid()
		if _, err := e.db.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES ($1, 'Order', 'o-1', 'Changed', '{}')`, id); err != nil {
			t.Fatal(err)
		}
		want = append(want, written{"o-1", id})
		if i == 2 {
			if _, err := e.db.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES ($1, 'Order', 'o-unbound', 'Changed', '{}')`, lost); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The restarts publish again what was not yet acknowledged: compare first deliveries.
	deadline := time.Now().Add(30 * time.Second)
	var first []string
	for time.Now().Before(deadline) {
		first = first[:0]
		seen := map[string]bool{}
		for _, d := range c.snapshot() {
			if !seen[d.msg.MessageId] {
				seen[d.msg.MessageId] = true
				first = append(first, d.msg.MessageId)
			}
		}
		if len(first) >= len(want) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	var ids []string
	for _, w := range want {
		ids = append(ids, w.id)
	}
	if strings.Join(first, " ") != strings.Join(ids, " ") {
		t.Errorf("first deliveries\n%s\nwant every bound row once, in commit order\n%s", strings.Join(first, "\n"), strings.Join(ids, "\n"))
	}
	e.waitQuarantined(1, 30*time.Second)
	reason := e.scalar(`SELECT table_name || ': ' || reason FROM cdc_router.quarantine WHERE event_id = $1`, lost)
	for _, part := range []string{"public.dbz_outbox: ", `routing key "o-unbound"`, fmt.Sprintf("exchange %q", orders), "no alternate exchange"} {
		if !strings.Contains(reason, part) {
			t.Errorf("quarantine of the unroutable row: %q, want it to contain %q", reason, part)
		}
	}
}

// exchangePerTopic starts a router on a Debezium-shaped table with amqp.topic.target=exchange (routing key:
// the key column), after declaring the exchange of the topic "Order" as the operator would, with the test
// queue bound to it for keys; it returns that exchange and a consumer of the queue. flags go to the router.
func exchangePerTopic(t *testing.T, keys ...string) (*env, string, *consumer) {
	return exchangePerTopicWith(t, []string{"--refusal-retry", "1s"}, keys...)
}

// exchangePerTopicWith is exchangePerTopic with the router's flags.
func exchangePerTopicWith(t *testing.T, flags []string, keys ...string) (*env, string, *consumer) {
	t.Helper()
	e, orders, config := perTopicExchanges(t, keys...)
	c := e.consume(e.queue)
	e.startMapped("dbz_outbox", config, flags...)
	return e, orders, c
}

// perTopicExchanges declares what exchangePerTopic declares and writes the router's --config file, without
// starting a router.
func perTopicExchanges(t *testing.T, keys ...string) (e *env, orders, config string) {
	t.Helper()
	e = mappedEnv(t, "dbz_outbox", debeziumTable)
	orders = e.exchange + ".Order"
	ch := e.channel()
	if err := ch.ExchangeDeclare(orders, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(orders, false, false) })
	for _, key := range keys {
		if err := ch.QueueBind(e.queue, key, orders, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	return e, orders, writeConfig(t, fmt.Sprintf(`amqp.topic.target=exchange
route.topic.replacement=%s.${routedByValue}
amqp.routing.key.source=key
`, e.exchange))
}
