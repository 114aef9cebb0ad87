package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// The tests of this file run each framework recipe of docs/howto/adopt-*.md against a consumer that declares
// and binds the RabbitMQ topology the framework's own consumer declares, and decodes each message as that
// consumer decodes it (no JVM or .NET here: the consumer is Go doing what the framework's code does). What
// each framework does is cited where it is used.

// TestFrameworkEventuateTramConsumer: Eventuate Tram's message table with its events, saga commands and saga
// replies, published by two routers on the row-filtered publications of adopt-eventuate.md (rows written
// before the first run come from each router's snapshot under its --snapshot-where), with the page's own
// RabbitMQ layout (amqp.topic.target=exchange, amqp.routing.key.source=key), read through the topology
// Eventuate's RabbitMQ consumer declares.
//
// eventuate-foundation/eventuate-messaging-rabbitmq, Subscription.leaderSelected and assignmentUpdated: for
// each channel (destination) and subscriber id, exchange "<destination>" of type fanout, exchange
// "<destination>-<subscriberId>" of type x-consistent-hash bound to it with key "", durable queues
// "<destination>-<subscriberId>-<partition>" bound to the latter with weight "10"; each delivery is read as
// JSonMapper.fromJson(body, MessageImpl.class) ({"payload": string, "headers": object}, the id in headers.ID).
// The producer side it replaces, EventuateRabbitMQProducer.send(topic, key, body), publishes to exchange
// topic with routing key key, and eventuate-cdc's MessageWithDestinationPublishingStrategy makes the topic the
// destination and the key the PARTITION_ID header, else the message id (commands and replies have none).
func TestFrameworkEventuateTramConsumer(t *testing.T) {
	node := testenv.StartRabbitMQNode(t)
	// x-consistent-hash is a plugin (rabbitmq_consistent_hash_exchange), enabled here on the test's own
	// node as `rabbitmq-plugins enable --online` does; the machine's broker is left as it is.
	node.Ctl("eval", `{ok, F} = application:get_env(rabbit, enabled_plugins_file), `+
		`ok = file:write_file(F, <<"[rabbitmq_consistent_hash_exchange].\n">>), rabbit_plugins:ensure(F).`)
	_, ddl, config := recipe(t, "eventuate-tram")
	e := newEnv(t)
	e.amqpURL = node.URL()
	e.declare(true, "#")
	e.exec(ddl)
	page := readFile(t, "../docs/howto/adopt-eventuate.md")
	e.exec(blockWith(t, page, "sql", "CREATE PUBLICATION message_events"))

	// The consumers: orderHistoryService subscribed to the Order events, the customer service's command
	// dispatcher to its command channel, the saga to its reply channel; 2 partitions each.
	const orders, commands, replies = "net.chrisrichardson.ftgo.Order", "customerService", "CreateOrderSaga-reply"
	ch := e.channel()
	queues := map[string][]string{}
	for dest, subscriber := range map[string]string{orders: "orderHistoryService", commands: "customerServiceCommands", replies: "CreateOrderSaga"} {
		group := dest + "-" + subscriber
		must(t, ch.ExchangeDeclare(group, "x-consistent-hash", false, false, false, false, nil))
		for p := range 2 {
			q := fmt.Sprintf("%s-%d", group, p)
			_, err := ch.QueueDeclare(q, true, false, false, false, nil)
			must(t, err)
			must(t, ch.QueueBind(q, "10", group, false, nil))
			queues[dest] = append(queues[dest], q)
		}
		must(t, ch.ExchangeDeclare(dest, "fanout", false, false, false, false, nil))
		must(t, ch.ExchangeBind(group, "", dest, false, nil))
	}
	// adopt-eventuate.md: a destination exchange declared durable would refuse Eventuate's declaration.
	if err := e.channel().ExchangeDeclare(orders, "fanout", true, false, false, false, nil); !isCode(err, amqp.PreconditionFailed) {
		t.Errorf("a durable declaration of Eventuate's non-durable exchange: %v, want 406", err)
	}
	consumers := map[string]*consumer{}
	for _, qs := range queues {
		for _, q := range qs {
			consumers[q] = e.consume(q)
		}
	}

	insert := func(id, dest, headers string) {
		e.exec(`INSERT INTO message (id, destination, headers, payload, published, creation_time) VALUES ($1, $2, $3, $4, 0, $5)`,
			id, dest, headers, fmt.Sprintf(`{"for":%q}`, id), time.Now().UnixMilli())
	}
	event := func(id, agg string) {
		insert(id, orders, fmt.Sprintf(`{"PARTITION_ID":"%s","event-aggregate-type":"%s","event-aggregate-id":"%s",`+
			`"event-type":"OrderRevised","DESTINATION":"%s","ID":"%s"}`, agg, orders, agg, orders, id))
	}
	command := func(id string) {
		insert(id, commands, fmt.Sprintf(`{"command_type":"ReserveCreditCommand","command_saga_type":"CreateOrderSaga",`+
			`"command_reply_to":"%s","command__destination":"%s","DESTINATION":"%s","ID":"%s"}`, replies, commands, commands, id))
	}
	reply := func(id, to string) {
		insert(id, replies, fmt.Sprintf(`{"reply_type":"CustomerCreditReserved","reply_outcome-type":"SUCCESS",`+
			`"reply_to_message_id":"%s","DESTINATION":"%s","ID":"%s"}`, to, replies, id))
	}
	// Written before the first run: each router's snapshot publishes its own kind.
	event("ev-0", "1001")
	command("cmd-0")
	reply("rep-0", "cmd-0")

	eventsConfig := writeConfig(t, readFile(t, config)+"amqp.topic.target=exchange\namqp.routing.key.source=key\n")
	// The commands' router: the recipe with the message id as the key, Eventuate's partition key for a
	// message without PARTITION_ID.
	keyLine := regexp.MustCompile(`(?m)^table\.field\.event\.key=.*$`)
	commandsConfig := writeConfig(t, keyLine.ReplaceAllString(readFile(t, config), "table.field.event.key=id")+
		"amqp.topic.target=exchange\namqp.routing.key.source=key\n")
	e.startStreaming("--table", "public.message", "--publication", "message_events", "--slot", e.slot+"_events",
		"--config", eventsConfig, "--snapshot-where", `headers LIKE '%"PARTITION_ID"%'`)
	e.startStreaming("--table", "public.message", "--publication", "message_commands", "--slot", e.slot+"_commands",
		"--config", commandsConfig, "--snapshot-where", `headers NOT LIKE '%"PARTITION_ID"%'`)

	want := []written{{"1001", "ev-0"}}
	for i := range 6 {
		agg := []string{"1001", "1002"}[i%2]
		event(fmt.Sprintf("ev-%d", i+1), agg)
		want = append(want, written{agg, fmt.Sprintf("ev-%d", i+1)})
	}
	command("cmd-1")
	reply("rep-1", "cmd-1")

	got := eventuateReads(t, consumers, queues, map[string]int{orders: 7, commands: 2, replies: 2})
	// Each aggregate's events reach one partition queue, in commit order.
	for _, agg := range []string{"1001", "1002"} {
		var ids, at []string
		for _, m := range got[orders] {
			if m.partition == agg {
				ids = append(ids, m.id)
				if !slices.Contains(at, m.queue) {
					at = append(at, m.queue)
				}
			}
		}
		var wantIDs []string
		for _, w := range want {
			if w.key == agg {
				wantIDs = append(wantIDs, w.id)
			}
		}
		if !slices.Equal(ids, wantIDs) || len(at) != 1 {
			t.Errorf("aggregate %s: %v on queues %v, want %v on one queue", agg, ids, at, wantIDs)
		}
	}
	for dest, ids := range map[string][]string{commands: {"cmd-0", "cmd-1"}, replies: {"rep-0", "rep-1"}} {
		var seen []string
		for _, m := range got[dest] {
			seen = append(seen, m.id)
			if m.routingKey != m.id {
				t.Errorf("%s %s: routing key %q, want the message id (no PARTITION_ID)", dest, m.id, m.routingKey)
			}
		}
		slices.Sort(seen)
		if !slices.Equal(seen, ids) {
			t.Errorf("%s read %v, want %v", dest, seen, ids)
		}
	}
	if q := e.quarantinedIDs(); len(q) != 0 {
		t.Errorf("quarantined: %v", q)
	}
}

// tramMessage is one delivery as Eventuate's consumer reads it (MessageImpl: payload and headers).
type tramMessage struct {
	queue, routingKey, id, partition, payload string
}

// eventuateReads waits for n[destination] deliveries on each destination's partition queues and decodes
// each body as MessageImpl's JSON; a body that does not decode fails the test.
func eventuateReads(t *testing.T, consumers map[string]*consumer, queues map[string][]string, n map[string]int) map[string][]tramMessage {
	t.Helper()
	count := func(dest string) int {
		total := 0
		for _, q := range queues[dest] {
			total += len(consumers[q].snapshot())
		}
		return total
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		done := true
		for dest, want := range n {
			done = done && count(dest) >= want
		}
		if done {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // a duplicate or a stray message would arrive now
	out := map[string][]tramMessage{}
	for dest, want := range n {
		for _, q := range queues[dest] {
			for _, d := range consumers[q].snapshot() {
				var m struct {
					Payload *string           `json:"payload"`
					Headers map[string]string `json:"headers"`
				}
				if err := json.Unmarshal(d.msg.Body, &m); err != nil || m.Payload == nil || m.Headers["ID"] == "" {
					t.Fatalf("%s: not a MessageImpl (%v): %s", q, err, d.msg.Body)
				}
				out[dest] = append(out[dest], tramMessage{q, d.msg.RoutingKey, m.Headers["ID"], m.Headers["PARTITION_ID"], *m.Payload})
				if *m.Payload != fmt.Sprintf(`{"for":%q}`, m.Headers["ID"]) {
					t.Errorf("%s: payload %q", m.Headers["ID"], *m.Payload)
				}
			}
		}
		if len(out[dest]) != want {
			t.Errorf("%s: %d messages, want %d", dest, len(out[dest]), want)
		}
	}
	return out
}

// TestFrameworkMassTransitDefaultVhost: the MassTransit recipe with rows addressed on the default vhost
// (rabbitmq://localhost/<exchange>), read through MassTransit's receive-endpoint topology.
func TestFrameworkMassTransitDefaultVhost(t *testing.T) {
	massTransitReads(t, "")
}

// TestFrameworkMassTransitNamedVhost: the same with a vhost in the address (rabbitmq://localhost/app/…):
// the router publishes into the vhost of its own AMQP URL, which must be the vhost the addresses name.
func TestFrameworkMassTransitNamedVhost(t *testing.T) {
	massTransitReads(t, testenv.Name(t))
}

// massTransitReads runs the MassTransit recipe with the router on vhost ("" for the default vhost).
//
// MassTransit's RabbitMQ topology (masstransit.io/documentation/transports/rabbitmq, "Exchanges" and its
// publish topology, RabbitMqPublishTopology with a FanoutExchangeTypeSelector): a message type is published
// to a durable fanout exchange named "Namespace:TypeName"; a receive endpoint declares a durable queue and a
// durable fanout exchange of the same name, binds the queue to it, and binds that exchange to the message
// type's exchange (exchange-to-exchange). Its transactional outbox stores the serialized message in Body and
// sends it to DestinationAddress, rabbitmq://host/[vhost/]Namespace:TypeName. A delivery is read by the
// deserializer its content_type names: application/vnd.masstransit+json is the envelope (MassTransit's
// JsonMessageEnvelope: messageId, messageType ["urn:message:Namespace:TypeName"], message, …), and the
// consumer is given the message if messageType names its type.
func massTransitReads(t *testing.T, vhost string) {
	table, ddl, config := recipe(t, "masstransit")
	e := newEnv(t)
	if vhost != "" {
		ctl := func(args ...string) {
			if out, err := testenv.Rabbitmqctl(t, args...).CombinedOutput(); err != nil {
				t.Fatalf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
			}
		}
		ctl("add_vhost", vhost)
		t.Cleanup(func() { _ = testenv.Rabbitmqctl(t, "delete_vhost", vhost).Run() })
		ctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
		u, err := url.Parse(e.amqpURL)
		must(t, err)
		u.Path = "/" + vhost
		e.amqpURL = u.String()
	}
	e.declare(true, "#")
	e.exec(ddl)
	if out, code := e.cli("migrate", "--table", "public."+table, "--publication", table+"_pub"); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, out)
	}

	namespace := "Orders_" + e.slot // unique on the shared broker
	messageType := namespace + ":OrderSubmitted"
	endpoint := "order-submitted-" + e.slot
	ch := e.channel()
	must(t, ch.ExchangeDeclare(messageType, "fanout", true, false, false, false, nil))
	must(t, ch.ExchangeDeclare(endpoint, "fanout", true, false, false, false, nil))
	_, err := ch.QueueDeclare(endpoint, true, false, false, false, nil)
	must(t, err)
	must(t, ch.QueueBind(endpoint, "", endpoint, false, nil))
	must(t, ch.ExchangeBind(endpoint, "", messageType, false, nil))
	t.Cleanup(func() {
		c := e.channel()
		c.QueueDelete(endpoint, false, false, false)
		c.ExchangeDelete(endpoint, false, false)
		c.ExchangeDelete(messageType, false, false)
	})
	c := e.consume(endpoint)
	e.startMapped(table, config)

	address := "rabbitmq://localhost/" + messageType
	if vhost != "" {
		address = "rabbitmq://localhost/" + vhost + "/" + messageType
	}
	const id, corr = "a0000000-0000-4000-8000-0000000000a1", "c0000000-0000-4000-8000-0000000000c1"
	envelope := fmt.Sprintf(`{"messageId":"%s","correlationId":"%s","conversationId":"%s","destinationAddress":"%s",`+
		`"messageType":["urn:message:%s"],"message":{"orderId":1,"total":12.5},"sentTime":"2026-12-05T06:00:00Z","headers":{}}`,
		id, corr, corr, address, messageType)
	e.exec(`INSERT INTO "OutboxMessage" ("MessageId", "ContentType", "MessageType", "Body", "CorrelationId", "DestinationAddress")
		VALUES ($1, 'application/vnd.masstransit+json', $2, $3, $4, $5)`, id, "urn:message:"+messageType, envelope, corr, address)

	m := e.deliveriesByID(c, 1)[id]
	if m.ContentType != "application/vnd.masstransit+json" || m.Exchange != messageType || m.CorrelationId != corr {
		t.Errorf("content type %q exchange %q correlation id %q", m.ContentType, m.Exchange, m.CorrelationId)
	}
	var env struct {
		MessageID   string          `json:"messageId"`
		MessageType []string        `json:"messageType"`
		Message     json.RawMessage `json:"message"`
	}
	if err := json.Unmarshal(m.Body, &env); err != nil {
		t.Fatalf("not a MassTransit envelope: %v: %s", err, m.Body)
	}
	var order struct {
		OrderID int     `json:"orderId"`
		Total   float64 `json:"total"`
	}
	if env.MessageID != id || !slices.Contains(env.MessageType, "urn:message:"+messageType) || json.Unmarshal(env.Message, &order) != nil || order.OrderID != 1 {
		t.Errorf("envelope: messageId %q messageType %v message %s", env.MessageID, env.MessageType, env.Message)
	}
}

// TestFrameworkQuarkusConsumer: the Quarkus recipe, rows written as quarkus-debezium-outbox writes them
// (insert and delete in one transaction), read by a SmallRye Reactive Messaging RabbitMQ consumer, and what
// adopt-quarkus.md says of a row written before the first run: never published.
//
// smallrye-reactive-messaging-rabbitmq's connector attributes (RabbitMQConnector): an incoming channel
// declares its exchange (exchange.declare=true) as durable, type topic, without arguments, declares a durable
// queue (queue.name) and binds it with routing-keys (default "#"); its message converter gives an
// application/json body as Vert.x JSON (Buffer.toJson), text/plain as a String, anything else as bytes.
func TestFrameworkQuarkusConsumer(t *testing.T) {
	table, ddl, config := recipe(t, "quarkus")
	e := mappedEnv(t, table, ddl)
	ctx := context.Background()
	write := func(id, payload string) {
		tx, err := e.db.Begin(ctx)
		must(t, err)
		_, err = tx.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, timestamp, payload)
			VALUES ($1, 'Order', 'o-1', 'OrderCreated', now(), $2)`, id, payload)
		must(t, err)
		_, err = tx.Exec(ctx, `DELETE FROM outboxevent WHERE id = $1`, id)
		must(t, err)
		must(t, tx.Commit(ctx))
	}
	const before, after = "a0000000-0000-4000-8000-0000000000b0", "a0000000-0000-4000-8000-0000000000a1"
	write(before, `{"id":"o-1","n":0}`)

	// The channel's defaults declare the router's exchange without its alternate-exchange argument: RabbitMQ
	// refuses (406), so the consumer is configured with exchange.declare=false, as adopt-quarkus.md says.
	ch := e.channel()
	if err := ch.ExchangeDeclare(e.exchange, "topic", true, false, false, false, nil); !isCode(err, amqp.PreconditionFailed) {
		t.Errorf("exchange.declare=true against the router's exchange: %v, want 406 PRECONDITION_FAILED", err)
	}
	queue := "orders-" + e.slot
	ch = e.channel()
	_, err := ch.QueueDeclare(queue, true, false, false, false, nil)
	must(t, err)
	t.Cleanup(func() { e.channel().QueueDelete(queue, false, false, false) })
	must(t, ch.QueueBind(queue, "outbox.event.Order", e.exchange, false, nil))
	c := e.consume(queue)

	e.startStreaming("--table", "public."+table, "--publication", table+"_pub", "--config", config) // --snapshot initial
	write(after, `{"id":"o-1","n":1}`)
	got := e.deliveriesByID(c, 1) // fails if the row written before the first run arrived too
	m, ok := got[after]
	if !ok {
		t.Fatalf("got %v, want only %s", got, after)
	}
	var payload map[string]any
	if m.ContentType != "application/json" || json.Unmarshal(m.Body, &payload) != nil || payload["n"] != float64(1) {
		t.Errorf("content type %q body %s: not the JsonObject SmallRye would give", m.ContentType, m.Body)
	}
	if m.Headers["eventType"] != "OrderCreated" || m.Headers["key"] != "o-1" {
		t.Errorf("headers %v", m.Headers)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	return string(b)
}

// blockWith returns the first ```lang block of page that contains text.
func blockWith(t *testing.T, page, lang, text string) string {
	t.Helper()
	for _, part := range strings.Split(page, "```"+lang+"\n")[1:] {
		block := part[:strings.Index(part, "```")]
		if strings.Contains(block, text) {
			return block
		}
	}
	t.Fatalf("no %s block with %q", lang, text)
	return ""
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// isCode says whether err is a channel or connection closed by RabbitMQ with reply code.
func isCode(err error, code int) bool {
	var aerr *amqp.Error
	return errors.As(err, &aerr) && aerr.Code == code
}
