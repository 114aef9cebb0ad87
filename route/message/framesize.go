package message

import (
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"
)

const (
	// DefaultFrameMax is RabbitMQ's default frame_max, used when the connection negotiated no limit (0).
	DefaultFrameMax = 131072
	// FrameOverhead is what a frame adds to its payload: type (1), channel (2), size (4) and the frame-end
	// octet (1). A frame of payload n takes n+8 bytes and must fit frame_max.
	FrameOverhead = 8
)

// contentHeaderSize is the exact payload size of the content header frame amqp091 writes for msg
// (amqp091 v1.16 headerFrame.write): class id (2), weight (2), body size (8) and property flags (2),
// then each property that is set, in the same conditions as amqp091 sets its flag. The second result is
// the header that takes the most bytes and its size, for the refusal's reason. Only the value types the
// mapping produces are accepted (string, int64, int32, int16, float64, bool, []byte); any other is an error.
func ContentHeaderSize(msg amqp.Publishing) (int, HeaderShare, error) {
	n := 2 + 2 + 8 + 2
	shortstr := func(s string) int {
		if s == "" {
			return 0
		}
		return 1 + len(s)
	}
	n += shortstr(msg.ContentType) + shortstr(msg.ContentEncoding)
	var largest HeaderShare
	if len(msg.Headers) > 0 {
		t, l, err := tableSize(msg.Headers)
		if err != nil {
			return 0, HeaderShare{}, err
		}
		n += t
		largest = l
	}
	if msg.DeliveryMode > 0 {
		n++
	}
	if msg.Priority > 0 {
		n++
	}
	n += shortstr(msg.CorrelationId) + shortstr(msg.ReplyTo) + shortstr(msg.Expiration) + shortstr(msg.MessageId)
	if !msg.Timestamp.IsZero() {
		n += 8
	}
	n += shortstr(msg.Type) + shortstr(msg.UserId) + shortstr(msg.AppId)
	return n, largest, nil
}

// HeaderShare is one header's part of the encoded table.
type HeaderShare struct {
	name  string
	bytes int
}

// tableSize is the encoded size of a field table as amqp091 writes it (writeTable, writeField): a long
// length (4), then per entry the name as a shortstr (1 + length) and the value as a type octet plus
// 'S' long length (4) + bytes, 'l' int64 (8), 'I' int32 (4), 's' int16 (2), 'd' float64 (8), 't' bool (1),
// 'x' byte array: long length (4) + bytes.
func tableSize(t amqp.Table) (int, HeaderShare, error) {
	n := 4
	var largest HeaderShare
	for k, v := range t {
		if len(k) > maxShortString {
			return 0, HeaderShare{}, fmt.Errorf("header name %q... is %d bytes, AMQP allows 255", k[:32], len(k))
		}
		e := 1 + len(k) + 1
		switch v := v.(type) {
		case string:
			e += 4 + len(v)
		case int64, float64:
			e += 8
		case int32:
			e += 4
		case int16:
			e += 2
		case []byte:
			e += 4 + len(v)
		case bool:
			e++
		default:
			return 0, HeaderShare{}, fmt.Errorf("header %q has a value of Go type %T, which the router never sends", k, v)
		}
		n += e
		if e > largest.bytes || (e == largest.bytes && k < largest.name) { // ties by name: the reason is stable
			largest = HeaderShare{name: k, bytes: e}
		}
	}
	return n, largest, nil
}

// checkFrame checks that the content header frame of msg fits frameMax (0: RabbitMQ's default) and
// returns its size, framing included. The broker closes the connection with 501 FRAME_ERROR for a frame
// that does not fit, and no setting of the router can change that for this message.
func CheckFrame(msg amqp.Publishing, frameMax int) (int, error) {
	return CheckFrameFix(msg, frameMax, NativeFrameFix)
}

// Fixes checkFrameFix names for a message over frame_max: of a native event, and of a mapped one.
const (
	NativeFrameFix = "shorten aggregate_id, aggregate_type, event_type or the headers column"
	MappedFrameFix = "shorten the key, type or id column, or the columns placed in headers (table.fields.additional.placement)"
)

// checkFrameFix is checkFrame with the fix its refusal names.
func CheckFrameFix(msg amqp.Publishing, frameMax int, fix string) (int, error) {
	if frameMax <= 0 {
		frameMax = DefaultFrameMax
	}
	payload, largest, err := ContentHeaderSize(msg)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrInvalidEvent, err)
	}
	if payload+FrameOverhead <= frameMax {
		return payload + FrameOverhead, nil
	}
	return 0, fmt.Errorf("%w: the message's properties and headers take %s bytes (%s with framing), over the broker's frame_max of %s: "+
		"%s (%s headers; the largest, %q, takes %s bytes)",
		ErrInvalidEvent, Thousands(payload), Thousands(payload+FrameOverhead), Thousands(frameMax), fix,
		Thousands(len(msg.Headers)), largest.name, Thousands(largest.bytes))
}

// thousands formats n with commas between groups of three digits: 131,072.
func Thousands(n int) string {
	s := strconv.Itoa(n)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
