package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// massTransitOutbox is a MassTransit-style outbox: quoted mixed-case columns, a content type and a
// correlation id per row, and the destination as a rabbitmq:// address.
const massTransitOutbox = `CREATE TABLE mt_outbox ("MessageId" uuid PRIMARY KEY, "SequenceNumber" bigserial NOT NULL,
	"ContentType" varchar(256) NOT NULL, "MessageType" text NOT NULL, "Body" text NOT NULL, "CorrelationId" uuid,
	"ConversationId" uuid, "DestinationAddress" varchar(256) NOT NULL, "SentTime" timestamptz NOT NULL DEFAULT now())`

// TestRowPropertiesFromColumns: amqp.property.content_type and amqp.property.correlation_id take each
// row's "ContentType" and "CorrelationId" (a NULL keeps the table-wide value), the exchange comes from the
// rabbitmq:// destination address, and with amqp.validate.json a row whose own content type is JSON must
// carry JSON while an XML row is published as it is.
func TestRowPropertiesFromColumns(t *testing.T) {
	e := mappedEnv(t, "mt_outbox", massTransitOutbox)
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
	e.startMapped("mt_outbox", writeConfig(t, `table.field.event.id=MessageId
table.field.event.key=CorrelationId
table.field.event.payload=Body
table.field.event.type=MessageType
table.field.event.timestamp=SentTime
route.by.field=DestinationAddress
route.topic.regex=rabbitmq://[^/]+/[^/]+/(?<exchange>[^?]+)(\\?.*)?
route.topic.replacement=${exchange}
amqp.topic.target=exchange
amqp.content.type=application/json
amqp.property.content_type=ContentType
amqp.property.correlation_id=CorrelationId
amqp.property.reply_to=ConversationId
amqp.validate.json=true
`))
	dest := fmt.Sprintf("rabbitmq://localhost/app/%s?durable=true", orders)
	const corr = "c0000000-0000-4000-8000-00000000000c"
	e.exec(`INSERT INTO mt_outbox ("MessageId", "ContentType", "MessageType", "Body", "CorrelationId", "DestinationAddress", "SentTime") VALUES
		('a0000000-0000-4000-8000-000000000001', 'application/vnd.masstransit+json', 'urn:message:Orders:OrderSubmitted', '{"message": {"orderId": 1}}', $1, $2, '2026-12-01 10:00:00.250+00'),
		('a0000000-0000-4000-8000-000000000002', 'application/xml', 'urn:message:Orders:OrderSubmitted', '<order id="2"/>', $1, $2, '2026-12-01 10:00:01+00'),
		('a0000000-0000-4000-8000-000000000003', 'application/vnd.masstransit+json', 'urn:message:Orders:OrderSubmitted', '<not json/>', NULL, $2, '2026-12-01 10:00:02+00')`, corr, dest)
	got := e.deliveriesByID(c, 2)
	first := got["a0000000-0000-4000-8000-000000000001"]
	checkProperties(t, "the JSON row", first, "application/vnd.masstransit+json", corr, "urn:message:Orders:OrderSubmitted", orders, `{"message": {"orderId": 1}}`)
	if first.Timestamp.Unix() != time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC).Unix() || first.Headers["timestamp_in_ms"] != time.Date(2026, 12, 1, 10, 0, 0, 250e6, time.UTC).UnixMilli() {
		t.Errorf("timestamp %v, timestamp_in_ms %v", first.Timestamp, first.Headers["timestamp_in_ms"])
	}
	if first.Headers["key"] != corr || first.ReplyTo != "" {
		t.Errorf("key header %v, reply_to %q (NULL ConversationId)", first.Headers["key"], first.ReplyTo)
	}
	checkProperties(t, "the XML row", got["a0000000-0000-4000-8000-000000000002"], "application/xml", corr, "urn:message:Orders:OrderSubmitted", orders, `<order id="2"/>`)
	q := e.waitQuarantined(1, 30*time.Second)
	if r := q["a0000000-0000-4000-8000-000000000003"]; r != "payload is not valid JSON (amqp.validate.json), though the message's content type is application/vnd.masstransit+json" {
		t.Errorf("quarantine: %q", r)
	}
	t.Logf("MassTransit-style message as it arrives: exchange %q routing key %q properties content_type=%q correlation_id=%q type=%q message_id=%q timestamp=%v delivery_mode=%d headers=%v body=%s",
		first.Exchange, first.RoutingKey, first.ContentType, first.CorrelationId, first.Type, first.MessageId, first.Timestamp.UTC(), first.DeliveryMode, first.Headers, first.Body)
}

// checkProperties compares a delivery's properties, exchange and body.
func checkProperties(t *testing.T, what string, m amqp.Delivery, contentType, correlationID, typ, exchange, body string) {
	t.Helper()
	if m.ContentType != contentType || m.CorrelationId != correlationID || m.Type != typ || m.Exchange != exchange ||
		string(m.Body) != body || m.DeliveryMode != 2 || m.RoutingKey != "" {
		t.Errorf("%s: content_type %q correlation_id %q type %q exchange %q routing key %q body %q delivery mode %d", what,
			m.ContentType, m.CorrelationId, m.Type, m.Exchange, m.RoutingKey, m.Body, m.DeliveryMode)
	}
}

// TestMappedColumnCaseHint: a mapping that names messageid for the quoted column "MessageId" is refused at
// start-up with a hint naming the column as the table spells it.
func TestMappedColumnCaseHint(t *testing.T) {
	e := mappedEnv(t, "mt_outbox", massTransitOutbox)
	r := e.start("", "--table", "public.mt_outbox", "--publication", "mt_outbox_pub", "--snapshot", "never",
		"--config", writeConfig(t, "table.field.event.id=messageid\ntable.field.event.key=\ntable.field.event.payload=Body\nroute.by.field=DestinationAddress\n"))
	const want = "column messageid named by table.field.event.id is missing (the table has a column MessageId: names are " +
		"case-sensitive; write table.field.event.id=MessageId)"
	if code := r.wait(30 * time.Second); code == 0 || !strings.Contains(r.Output(), want) {
		t.Errorf("exit %d, want the case hint %q:\n%s", code, want, tail(r.Output(), 5))
	}
}
