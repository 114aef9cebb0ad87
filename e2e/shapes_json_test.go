package e2e

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// eventuateMessage is Eventuate Tram's message table as its schema creates it (eventuate.message, here in
// public): the aggregate's key and the event type live only inside the headers column's JSON.
const eventuateMessage = `CREATE TABLE message (id varchar(1000) PRIMARY KEY, destination text NOT NULL, headers text NOT NULL,
	payload text NOT NULL, published smallint DEFAULT 0, message_partition smallint, creation_time bigint)`

// TestJSONColumnAsHeadersAndKey: amqp.headers.json spreads the headers column's JSON object into AMQP
// headers (typed as the native headers column, under the mapping's own headers), and the key and the type
// come from its PARTITION_ID and event-type fields (column:field), so the events of one aggregate keep
// their order. A row whose headers lack the key field, or are not JSON, is quarantined naming the option,
// and the stream goes on.
func TestJSONColumnAsHeadersAndKey(t *testing.T) {
	e := mappedEnv(t, "message", eventuateMessage)
	c := e.consume(e.queue)
	e.startMapped("message", writeConfig(t, `table.field.event.key=headers:PARTITION_ID
table.field.event.type=headers:event-type
route.by.field=destination
route.topic.replacement=${routedByValue}
table.field.event.timestamp=creation_time
amqp.headers.json=headers
amqp.content.type=application/json
`))
	insert := `INSERT INTO message (id, destination, headers, payload, creation_time) VALUES ($1, 'net.chrisrichardson.ftgo.Order', $2, $3, 1764583200123)`
	e.exec(insert, "0000018f-a000-0001", `{"PARTITION_ID": "1001", "event-aggregate-type": "net.chrisrichardson.ftgo.Order",
		"event-aggregate-id": "1001", "event-type": "OrderCreatedEvent", "DESTINATION": "net.chrisrichardson.ftgo.Order",
		"ID": "0000018f-a000-0001", "retries": 3, "x-death": null}`, `{"orderId": 1001}`)
	e.exec(insert, "0000018f-a000-0002", `{"ID": "0000018f-a000-0002", "event-type": "OrderCreatedEvent"}`, `{}`)
	e.exec(insert, "0000018f-a000-0003", `PARTITION_ID=1001`, `{}`)
	e.exec(insert, "0000018f-a000-0004", `{"PARTITION_ID": "1001", "event-type": "OrderApprovedEvent", "CC": "x"}`, `{}`)
	e.exec(insert, "0000018f-a000-0005", `{"PARTITION_ID": "1001", "event-type": "OrderApprovedEvent", "ID": "0000018f-a000-0005"}`, `{"orderId": 1001}`)
	got := e.deliveriesByID(c, 2)
	m := got["0000018f-a000-0001"]
	checkHeaders(t, "the first message", m.Headers, amqp.Table{"PARTITION_ID": "1001", "event-type": "OrderCreatedEvent",
		"event-aggregate-id": "1001", "DESTINATION": "net.chrisrichardson.ftgo.Order", "ID": "0000018f-a000-0001",
		"retries": int64(3), "key": "1001", "id": "0000018f-a000-0001", "timestamp_in_ms": int64(1764583200123)})
	if _, ok := m.Headers["x-death"]; ok {
		t.Errorf("a JSON null became a header: %v", m.Headers)
	}
	if m.Type != "OrderCreatedEvent" || m.RoutingKey != "net.chrisrichardson.ftgo.Order" || string(m.Body) != `{"orderId": 1001}` {
		t.Errorf("type %q routing key %q body %s", m.Type, m.RoutingKey, m.Body)
	}
	if got["0000018f-a000-0005"].Type != "OrderApprovedEvent" {
		t.Errorf("second event of the aggregate: %+v", got["0000018f-a000-0005"])
	}
	q := e.waitQuarantined(3, 30*time.Second)
	for id, want := range map[string]string{
		"0000018f-a000-0002": `headers (table.field.event.key=headers:PARTITION_ID) has no field "PARTITION_ID"`,
		"0000018f-a000-0003": "headers (table.field.event.key=headers:PARTITION_ID) is not a JSON object",
	} {
		if q[id] != want {
			t.Errorf("quarantine of %s: %q, want %q", id, q[id], want)
		}
	}
	if r := q["0000018f-a000-0004"]; !strings.Contains(r, `header name "CC" of the amqp.headers.json column is reserved by RabbitMQ`) {
		t.Errorf("quarantine of the CC row: %q", r)
	}
	t.Logf("Eventuate-style message as it arrives: exchange %q routing key %q content_type=%q type=%q message_id=%q timestamp=%v delivery_mode=%d headers=%v body=%s",
		m.Exchange, m.RoutingKey, m.ContentType, m.Type, m.MessageId, m.Timestamp.UTC(), m.DeliveryMode, m.Headers, m.Body)
}

// TestEnvelopeNestsJSONTextColumn: with headers:envelope and amqp.envelope.json=headers, the body is
// {"payload": <the payload text as a JSON string>, "headers": <the headers column as a JSON object>}, the
// shape of the message JSON Eventuate Tram serializes (MessageImpl: payload and headers); a headers value
// that is not JSON is quarantined naming the option.
func TestEnvelopeNestsJSONTextColumn(t *testing.T) {
	e := mappedEnv(t, "message", eventuateMessage)
	c := e.consume(e.queue)
	e.startMapped("message", writeConfig(t, `table.field.event.key=headers:PARTITION_ID
route.by.field=destination
route.topic.replacement=${routedByValue}
table.fields.additional.placement=headers:envelope
amqp.envelope.json=headers
`))
	insert := `INSERT INTO message (id, destination, headers, payload) VALUES ($1, 'Order', $2, $3)`
	e.exec(insert, "m-1", `{"PARTITION_ID": "1001", "ID": "m-1", "event-type": "OrderCreatedEvent"}`, `{"orderId": 1001}`)
	e.exec(insert, "m-2", `{"PARTITION_ID": "1001", "ID": "m-2", "broken": }`, `{}`)
	m := e.deliveriesByID(c, 1)["m-1"]
	const want = `{"payload":"{\"orderId\": 1001}","headers":{"PARTITION_ID":"1001","ID":"m-1","event-type":"OrderCreatedEvent"}}`
	if string(m.Body) != want || m.ContentType != "application/json" {
		t.Errorf("body %s content type %q, want %s", m.Body, m.ContentType, want)
	}
	// The key field is read first: the broken JSON fails there, naming that option.
	if r := e.waitQuarantined(1, 30*time.Second)["m-2"]; r != "headers (table.field.event.key=headers:PARTITION_ID) is not a JSON object" {
		t.Errorf("quarantine: %q", r)
	}
	t.Logf("Eventuate-body message as it arrives: routing key %q content_type=%q message_id=%q headers=%v body=%s",
		m.RoutingKey, m.ContentType, m.MessageId, m.Headers, m.Body)
}
