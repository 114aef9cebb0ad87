package message

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// maxShortString is the longest AMQP shortstr: the routing key, the message id, the type and every
// header name are shortstr; a longer one cannot be encoded at all.
const maxShortString = 255

// Check reports why an event cannot become a message RabbitMQ accepts, or nil when, as far as can be
// known without a connection, it can. The error wraps ErrInvalidEvent (cdc.ErrUnpublishable). Check
// refuses:
//   - a routing key ("<aggregate_type>.<event_type>"), a message id (the outbox id) or a header name of
//     more than 255 bytes (AMQP short strings), and an empty outbox id (returns are matched by it);
//   - a headers column that is not a JSON object;
//   - a header name RabbitMQ reserves (see reservedHeader): CC and BCC, its dead-lettering history, and
//     its AMQP 1.0 conversion headers.
//
// What Check cannot know is the connection's frame_max, which bounds the encoded properties and headers;
// Router.Publish checks that as well and refuses such an event the same way. The decoder quarantines a
// row that fails Check.
func Check(ev cdc.Event) error {
	if ev.Mapped != nil {
		return checkMapped(ev)
	}
	if noUserHeaders(ev.Headers) { // most rows: nothing to convert, and no table to build only to drop it
		return check(ev, map[string]json.RawMessage(nil), nil)
	}
	// The names are what the check needs: the values are converted once, by build in Publish.
	raw, err := userHeaderValues(ev.Headers)
	return check(ev, raw, err)
}

// check is Check on the user headers, converted (an amqp.Table) or not (their JSON values, nulls left
// out as userHeaders leaves them out): only the names are checked.
func check[V any](ev cdc.Event, user map[string]V, headersErr error) error {
	if n := len(ev.AggregateType) + 1 + len(ev.EventType); n > maxShortString {
		return fmt.Errorf("%w: the routing key %q... (aggregate_type.event_type) is %d bytes, AMQP allows 255: shorten aggregate_type or event_type",
			ErrInvalidEvent, RoutingKey(ev)[:32], n)
	}
	switch {
	case ev.ID == "":
		return fmt.Errorf("%w: the outbox id (message id) is empty", ErrInvalidEvent)
	case len(ev.ID) > maxShortString:
		return fmt.Errorf("%w: the outbox id (message id) is %d bytes, AMQP allows 255", ErrInvalidEvent, len(ev.ID))
	case headersErr != nil:
		return fmt.Errorf("%w: headers: %w", ErrInvalidEvent, headersErr)
	}
	bad, found := "", false // the first offending name in byte order, so the reason does not depend on map order
	for k := range user {
		if _, reserved := reservedHeader(k); (len(k) > maxShortString || reserved) && (!found || k < bad) {
			bad, found = k, true
		}
	}
	if !found {
		return nil
	}
	if len(bad) > maxShortString {
		return fmt.Errorf("%w: header name %q... is %d bytes, AMQP allows 255: shorten it in the headers column",
			ErrInvalidEvent, bad[:32], len(bad))
	}
	why, _ := reservedHeader(bad)
	return fmt.Errorf("%w: header name %q is reserved by RabbitMQ: %s; rename it in the headers column", ErrInvalidEvent, bad, why)
}

// reservedHeader reports whether RabbitMQ gives the header name k a meaning of its own on publish or in
// later processing, and why a value from the outbox must not carry it. RabbitMQ compares header names
// byte for byte, so "cc" or "Bcc" are ordinary headers. The router's own headers (the aggregate ones,
// commit_lsn and OriginHeaders) are never a user header: the router's value wins, or the row's is dropped.
func reservedHeader(k string) (string, bool) {
	switch k {
	case "CC", "BCC":
		return "it is RabbitMQ's sender-selected distribution, so RabbitMQ would route copies of the message to " +
			"the routing keys it lists (" + k + " must be an array of strings; any other value makes RabbitMQ close " +
			"the channel with 406 unacceptable_type_in_header)", true
	case "x-death", "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
		"x-last-death-queue", "x-last-death-reason", "x-last-death-exchange":
		return "it is RabbitMQ's dead-lettering history, which the broker writes when it dead-letters the message " +
			"(and RabbitMQ 3.13.3+ reads from publishers), so consumers would see a forged history", true
	}
	if strings.HasPrefix(k, "x-amqp-1.0-") {
		return "RabbitMQ 3.13+ stores AMQP 1.0 message sections under x-amqp-1.0-* headers and decodes them when " +
			"it converts the message for an AMQP 1.0 consumer or a stream, which fails for any other value", true
	}
	return "", false
}
