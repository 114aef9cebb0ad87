package message

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// HeaderTombstone marks a mapped event published for an empty payload under
// route.tombstone.on.empty.payload with amqp.tombstone=empty-body: the body is empty.
const HeaderTombstone = "tombstone"

// mappedMessage maps an event of a --config mapping (ev.Mapped set) to its routing key and message:
// persistent, message_id = the event id as text, type = the type column when present, timestamp, content
// type and the amqp.property.<name> properties from the mapping, the payload (or envelope) as the body, and the mapping's typed headers
// in order (a later header of the same name wins), then commit_lsn, aggregate_bucket (of the routing value and the key), tombstone and the origin headers (setOrigin: a row's own are dropped).
func mappedMessage(ev cdc.Event) (string, amqp.Publishing) {
	m := ev.Mapped
	h, err := userHeaders(m.JSONHeaders) // checked by checkMapped; the mapping's headers win over its keys
	if err != nil || h == nil {
		h = make(amqp.Table, len(m.Headers)+3)
	}
	for _, x := range m.Headers {
		h[x.Name] = x.Value
	}
	h[HeaderCommitLSN] = ev.CommitLSN.String()
	h[HeaderAggregateBucket] = eventBucket(ev)
	if m.Tombstone {
		h[HeaderTombstone] = true
	}
	setOrigin(h, ev)
	return m.RoutingKey, amqp.Publishing{
		Headers:         h,
		ContentType:     m.ContentType,
		ContentEncoding: m.ContentEncoding,
		CorrelationId:   m.CorrelationID,
		ReplyTo:         m.ReplyTo,
		AppId:           m.AppID,
		DeliveryMode:    amqp.Persistent,
		MessageId:       ev.ID,
		Timestamp:       m.Timestamp,
		Type:            ev.EventType,
		Body:            ev.Payload,
	}
}

// checkMapped is Check for a mapped event: the routing key, message id, type and header names within
// AMQP's 255 bytes, a non-empty id, and no header name RabbitMQ reserves.
func checkMapped(ev cdc.Event) error {
	m := ev.Mapped
	switch {
	case len(m.RoutingKey) > maxShortString:
		return fmt.Errorf("%w: the routing key %q... (route.by.field through route.topic.replacement) is %d bytes, AMQP allows 255: "+
			"shorten the value or the replacement", ErrInvalidEvent, m.RoutingKey[:32], len(m.RoutingKey))
	case ev.ID == "":
		return fmt.Errorf("%w: the event id (table.field.event.id, the message id) is empty", ErrInvalidEvent)
	case len(ev.ID) > maxShortString:
		return fmt.Errorf("%w: the event id (table.field.event.id, the message id; a bytea id is sent in hex) is %d bytes, AMQP allows 255",
			ErrInvalidEvent, len(ev.ID))
	case len(ev.EventType) > maxShortString:
		return fmt.Errorf("%w: the type (table.field.event.type) is %d bytes, AMQP allows 255", ErrInvalidEvent, len(ev.EventType))
	}
	for name, v := range map[string]string{"content_type": m.ContentType, "content_encoding": m.ContentEncoding,
		"correlation_id": m.CorrelationID, "reply_to": m.ReplyTo, "app_id": m.AppID} {
		if len(v) > maxShortString {
			return fmt.Errorf("%w: the %s property (amqp.property.%s) is %d bytes, AMQP allows 255", ErrInvalidEvent, name, name, len(v))
		}
	}
	if m.ByExchange {
		if err := checkExchangeName(m.Exchange); err != nil {
			return err
		}
	}
	if len(m.JSONHeaders) > 0 {
		if err := checkJSONHeaders(m.JSONHeaders); err != nil {
			return err
		}
	}
	for _, x := range m.Headers {
		if why, reserved := reservedHeader(x.Name); reserved {
			return fmt.Errorf("%w: header name %q is reserved by RabbitMQ: %s; choose another alias in table.fields.additional.placement",
				ErrInvalidEvent, x.Name, why)
		}
	}
	return nil
}

// CheckHeaderName reports why RabbitMQ gives the header name a meaning of its own (see Check), or nil. A
// mapping's header names are checked with it once, at start-up, so that no row is quarantined for them.
func CheckHeaderName(name string) error {
	if why, reserved := reservedHeader(name); reserved {
		return fmt.Errorf("header name %q is reserved by RabbitMQ: %s", name, why)
	}
	return nil
}

// checkExchangeName refuses an exchange name (amqp.topic.target=exchange) that RabbitMQ cannot hold: empty
// (the default exchange, which routes by queue name), over 255 bytes, not UTF-8, or with control characters.
func checkExchangeName(name string) error {
	const option = "(route.by.field through route.topic.replacement, with amqp.topic.target=exchange)"
	switch {
	case name == "":
		return fmt.Errorf("%w: the exchange name %s is empty, which is RabbitMQ's default exchange: write a routing value", ErrInvalidEvent, option)
	case len(name) > maxShortString:
		return fmt.Errorf("%w: the exchange name %q... %s is %d bytes, AMQP allows 255: shorten the value or the replacement",
			ErrInvalidEvent, name[:32], option, len(name))
	case !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0:
		return fmt.Errorf("%w: the exchange name %q %s is not UTF-8 text without control characters", ErrInvalidEvent, name, option)
	}
	return nil
}

// checkJSONHeaders checks the amqp.headers.json column's keys as Check checks the native headers column's:
// a JSON object whose names fit a short string and are not reserved by RabbitMQ.
func checkJSONHeaders(raw []byte) error {
	obj, err := userHeaderValues(raw)
	if err != nil {
		return fmt.Errorf("%w: the amqp.headers.json column is %w", ErrInvalidEvent, err)
	}
	bad, found := "", false // the first offending name in byte order, as check reports it
	for k := range obj {
		if _, reserved := reservedHeader(k); (len(k) > maxShortString || reserved) && (!found || k < bad) {
			bad, found = k, true
		}
	}
	switch {
	case !found:
		return nil
	case len(bad) > maxShortString:
		return fmt.Errorf("%w: header name %q... of the amqp.headers.json column is %d bytes, AMQP allows 255: shorten it",
			ErrInvalidEvent, bad[:32], len(bad))
	}
	why, _ := reservedHeader(bad)
	return fmt.Errorf("%w: header name %q of the amqp.headers.json column is reserved by RabbitMQ: %s; rename it in the column",
		ErrInvalidEvent, bad, why)
}
