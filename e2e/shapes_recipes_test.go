package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestRecipeQuarkus: the table as Quarkus' outbox extension creates it (varchar payload), rows written as
// it writes them (insert, then delete in the same transaction); the JSON body goes out as
// application/json and a payload that is not JSON is quarantined.
func TestRecipeQuarkus(t *testing.T) {
	table, ddl, config := recipe(t, "quarkus")
	e := mappedEnv(t, table, ddl)
	c := e.consume(e.queue)
	e.startMapped(table, config)
	ctx := context.Background()
	for _, row := range [][]string{
		{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "Order", "o-1", "OrderCreated", `{"id":"o-1","total":12.5}`},
		{"b1ffcd00-0d1c-4ef8-bb6d-6bb9bd380a22", "Order", "o-1", "OrderNoted", `order o-1 noted`},
	} {
		tx, err := e.db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, timestamp, payload, tracingspancontext)
			VALUES ($1, $2, $3, $4, '2026-12-01 10:11:12.345', $5, $6)`, row[0], row[1], row[2], row[3], row[4],
			"#Tue Dec 01 10:11:12 UTC 2026\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n"); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM outboxevent WHERE id = $1`, row[0]); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	m := e.deliveriesByID(c, 1)["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]
	if m.RoutingKey != "outbox.event.Order" || m.Type != "OrderCreated" || m.ContentType != "application/json" ||
		string(m.Body) != `{"id":"o-1","total":12.5}` || m.Timestamp.Unix() != time.Date(2026, 12, 1, 10, 11, 12, 0, time.UTC).Unix() || m.DeliveryMode != 2 {
		t.Errorf("key %q type %q content %q body %s ts %v", m.RoutingKey, m.Type, m.ContentType, m.Body, m.Timestamp)
	}
	checkHeaders(t, "Order", m.Headers, amqp.Table{"id": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "key": "o-1", "eventType": "OrderCreated",
		"timestamp_in_ms": time.Date(2026, 12, 1, 10, 11, 12, 345e6, time.UTC).UnixMilli(),
		"traceparent":     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
	if r := e.waitQuarantined(1, 30*time.Second)["b1ffcd00-0d1c-4ef8-bb6d-6bb9bd380a22"]; !strings.HasPrefix(r, "payload is not valid JSON (amqp.validate.json)") {
		t.Errorf("quarantine of the text payload: %q", r)
	}
	logMessage(t, "quarkus", m)
}

// TestRecipeEventuateTram: Eventuate Tram's message table, rows written as its producer writes them (one
// message per transaction, headers a JSON object with PARTITION_ID); the events of each aggregate arrive in
// commit order, the headers as AMQP headers, the body as Eventuate's message JSON.
func TestRecipeEventuateTram(t *testing.T) {
	table, ddl, config := recipe(t, "eventuate-tram")
	e := mappedEnv(t, table, ddl)
	c := e.consume(e.queue)
	e.startMapped(table, config)
	var want []written
	for i := range 8 {
		agg := []string{"1001", "1002"}[i%2]
		id := fmt.Sprintf("0000018f-a000-%04d", i)
		headers := fmt.Sprintf(`{"PARTITION_ID":"%s","event-aggregate-type":"net.chrisrichardson.ftgo.Order","event-aggregate-id":"%s",`+
			`"event-type":"OrderRevised","DESTINATION":"net.chrisrichardson.ftgo.Order","ID":"%s","DATE":"Tue, 1 Dec 2026 10:00:00 GMT"}`, agg, agg, id)
		e.exec(`INSERT INTO message (id, destination, headers, payload, published, creation_time) VALUES ($1, $2, $3, $4, 0, $5)`,
			id, "net.chrisrichardson.ftgo.Order", headers, fmt.Sprintf(`{"revision":%d}`, i), 1764583200000+int64(i))
		want = append(want, written{agg, id})
	}
	inCommitOrder(t, c, want)
	var m amqp.Delivery
	for _, d := range c.snapshot() {
		if d.msg.MessageId == "0000018f-a000-0000" {
			m = d.msg
		}
	}
	if m.RoutingKey != "net.chrisrichardson.ftgo.Order" || m.ContentType != "application/json" ||
		string(m.Body) != `{"payload":"{\"revision\":0}","headers":{"PARTITION_ID":"1001","event-aggregate-type":"net.chrisrichardson.ftgo.Order",`+
			`"event-aggregate-id":"1001","event-type":"OrderRevised","DESTINATION":"net.chrisrichardson.ftgo.Order","ID":"0000018f-a000-0000",`+
			`"DATE":"Tue, 1 Dec 2026 10:00:00 GMT"}}` {
		t.Errorf("routing key %q content type %q body %s", m.RoutingKey, m.ContentType, m.Body)
	}
	checkHeaders(t, "message", m.Headers, amqp.Table{"PARTITION_ID": "1001", "event-type": "OrderRevised", "ID": "0000018f-a000-0000",
		"DESTINATION": "net.chrisrichardson.ftgo.Order", "key": "1001", "id": "0000018f-a000-0000", "timestamp_in_ms": int64(1764583200000)})
	logMessage(t, "eventuate-tram", m)
}

// TestRecipeMassTransit: the MassTransit-style table under its quoted mixed-case name; each row goes to the
// exchange its address names, with its own content type and correlation id.
func TestRecipeMassTransit(t *testing.T) {
	table, ddl, config := recipe(t, "masstransit")
	e := mappedEnv(t, table, ddl)
	orders := e.exchange + ".Orders"
	ch := e.channel()
	if err := ch.ExchangeDeclare(orders, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(orders, false, false) })
	if err := ch.QueueBind(e.queue, "", orders, false, nil); err != nil {
		t.Fatal(err)
	}
	c := e.consume(e.queue)
	e.startMapped(table, config)
	const corr = "c0000000-0000-4000-8000-00000000000c"
	e.exec(`INSERT INTO "OutboxMessage" ("MessageId", "ContentType", "MessageType", "Body", "CorrelationId", "DestinationAddress", "SentTime")
		VALUES ('a0000000-0000-4000-8000-000000000001', 'application/vnd.masstransit+json', 'urn:message:Orders:OrderSubmitted',
		        '{"messageId":"a0000000-0000-4000-8000-000000000001","message":{"orderId":1}}', $1, $2, '2026-12-01 10:00:00.250+00'),
		       ('a0000000-0000-4000-8000-000000000002', 'application/xml', 'urn:message:Orders:OrderSubmitted', '<order id="2"/>', $1, $2, now()),
		       ('a0000000-0000-4000-8000-000000000003', 'application/json', 'urn:message:Orders:OrderSubmitted', '{"orderId":3}', $1, $3, now())`,
		corr, fmt.Sprintf("rabbitmq://localhost/app/%s?durable=true", orders), fmt.Sprintf("rabbitmq://localhost/%s", orders))
	got := e.deliveriesByID(c, 3)
	m := got["a0000000-0000-4000-8000-000000000001"]
	checkProperties(t, "the JSON row", m, "application/vnd.masstransit+json", corr, "urn:message:Orders:OrderSubmitted", orders,
		`{"messageId":"a0000000-0000-4000-8000-000000000001","message":{"orderId":1}}`)
	checkHeaders(t, "the JSON row", m.Headers, amqp.Table{"id": "a0000000-0000-4000-8000-000000000001", "key": corr,
		"timestamp_in_ms": time.Date(2026, 12, 1, 10, 0, 0, 250e6, time.UTC).UnixMilli()})
	checkProperties(t, "the XML row", got["a0000000-0000-4000-8000-000000000002"], "application/xml", corr, "urn:message:Orders:OrderSubmitted", orders, `<order id="2"/>`)
	checkProperties(t, "the row addressed on the default vhost", got["a0000000-0000-4000-8000-000000000003"], "application/json", corr,
		"urn:message:Orders:OrderSubmitted", orders, `{"orderId":3}`)
	logMessage(t, "masstransit", m)
}

// logMessage logs a delivery as it arrived, for the record of what each recipe publishes.
func logMessage(t *testing.T, recipe string, m amqp.Delivery) {
	t.Logf("recipe %s: exchange=%q routing_key=%q message_id=%q type=%q content_type=%q correlation_id=%q timestamp=%s delivery_mode=%d headers=%v body=%s",
		recipe, m.Exchange, m.RoutingKey, m.MessageId, m.Type, m.ContentType, m.CorrelationId, m.Timestamp.UTC().Format(time.RFC3339), m.DeliveryMode, m.Headers, m.Body)
}
