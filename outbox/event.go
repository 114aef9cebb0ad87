package outbox

import (
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// ErrInvalidEvent is wrapped by Write's error for an event that the router could not publish (it would be
// quarantined); nothing was sent to PostgreSQL and the transaction is untouched.
var ErrInvalidEvent = errors.New("outbox: invalid event")

// Event is one outbox row to write.
type Event struct {
	ID            string         // outbox id, a UUID; empty means a new random (version 4) UUID
	AggregateType string         // aggregate_type, e.g. "order"; required
	AggregateID   string         // aggregate_id, e.g. "42"; required
	Version       int64          // aggregate_version; zero means the aggregate's next version (see Writer.Write)
	Type          string         // event_type, e.g. "paid"; required
	SchemaVersion int32          // schema_version; zero means 1
	Payload       []byte         // payload: a JSON value, published as the message body
	Headers       map[string]any // headers: JSON-encoded into the headers column; nil means none
	OccurredAt    time.Time      // occurred_at; zero means now() (the transaction's start)
}

// maxShortString is the longest AMQP short string: the routing key, the message id and header names.
const maxShortString = 255

// check refuses what the router would quarantine for its shape. It does not know the broker's frame_max or
// the router's --max-payload-bytes; the router checks those.
func (ev *Event) check() error {
	switch {
	case ev.AggregateType == "":
		return fmt.Errorf("%w: AggregateType is empty", ErrInvalidEvent)
	case ev.AggregateID == "":
		return fmt.Errorf("%w: AggregateID is empty", ErrInvalidEvent)
	case ev.Type == "":
		return fmt.Errorf("%w: Type is empty", ErrInvalidEvent)
	case len(ev.AggregateType)+1+len(ev.Type) > maxShortString:
		return fmt.Errorf("%w: the routing key AggregateType.Type is %d bytes, AMQP allows 255: shorten AggregateType or Type",
			ErrInvalidEvent, len(ev.AggregateType)+1+len(ev.Type))
	case ev.Version < 0:
		return fmt.Errorf("%w: Version %d is negative (zero means the next version)", ErrInvalidEvent, ev.Version)
	case ev.SchemaVersion < 0:
		return fmt.Errorf("%w: SchemaVersion %d is negative (zero means 1)", ErrInvalidEvent, ev.SchemaVersion)
	case ev.ID != "" && !cdc.IsUUID(ev.ID):
		return fmt.Errorf("%w: ID %.40q is not a UUID (leave it empty for a new one)", ErrInvalidEvent, ev.ID)
	case !json.Valid(ev.Payload):
		return fmt.Errorf("%w: Payload is not a JSON value (the payload column is jsonb)", ErrInvalidEvent)
	}
	for k := range ev.Headers {
		if len(k) > maxShortString {
			return fmt.Errorf("%w: header name %.32q... is %d bytes, AMQP allows 255", ErrInvalidEvent, k, len(k))
		}
		if reservedHeader(k) {
			return fmt.Errorf("%w: header name %q is reserved by RabbitMQ (sender-selected distribution, dead-lettering "+
				"history or AMQP 1.0 conversion): rename it", ErrInvalidEvent, k)
		}
	}
	return nil
}

// reservedHeader reports whether RabbitMQ gives header name k a meaning of its own; the router quarantines
// such rows (route/message.Check). Names are compared byte for byte, as RabbitMQ does.
func reservedHeader(k string) bool {
	switch k {
	case "CC", "BCC", "x-death", "x-first-death-queue", "x-first-death-reason", "x-first-death-exchange",
		"x-last-death-queue", "x-last-death-reason", "x-last-death-exchange":
		return true
	}
	return strings.HasPrefix(k, "x-amqp-1.0-")
}

// headersJSON is the headers column: ev.Headers plus the trace context, where the event's own traceparent
// and tracestate win over the context's.
func headersJSON(ev *Event, tc traceContext) ([]byte, error) {
	if len(ev.Headers) == 0 && tc.parent == "" {
		return []byte("{}"), nil
	}
	h := make(map[string]any, len(ev.Headers)+2)
	if tc.parent != "" {
		h[HeaderTraceParent] = tc.parent
		if tc.state != "" {
			h[HeaderTraceState] = tc.state
		}
	}
	if _, own := ev.Headers[HeaderTraceParent]; own { // a tracestate belongs to its traceparent
		delete(h, HeaderTraceState)
	}
	for k, v := range ev.Headers {
		h[k] = v
	}
	b, err := json.Marshal(h)
	if err != nil {
		return nil, fmt.Errorf("%w: Headers: %w", ErrInvalidEvent, err)
	}
	return b, nil
}

// newUUID is a random (version 4) UUID in its text form.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
