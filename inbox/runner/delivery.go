package runner

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// The AMQP headers cdc-router sets on every message; other headers are user headers.
const (
	headerAggregateType    = "aggregate_type"
	headerAggregateID      = "aggregate_id"
	headerAggregateVersion = "aggregate_version"
	headerSchemaVersion    = "schema_version"
	headerCommitLSN        = "commit_lsn"
	headerBackfill         = "x-backfill"
	// headerFullState is set by the producer, in the outbox row's headers ({"full_state": true}), on an
	// event whose payload is the aggregate's whole state.
	headerFullState = "full_state"
)

// DecodeDelivery reads a cdc-router message: message_id is the event id, type the event type, the body
// the payload, and the aggregate_type, aggregate_id, aggregate_version, schema_version, commit_lsn,
// x-backfill and full_state headers the rest (full_state a boolean or a string such as "true"; aggregate_bucket,
// which only routes, is left out). Integer headers may arrive as any integer type amqp091 decodes (int8 to
// int64, unsigned) or as a decimal string. Other headers are copied into inbox.Event.Headers in text form. The
// error wraps inbox.ErrMalformed and the returned inbox.Event holds whatever could be read, for the failed table.
func DecodeDelivery(d amqp.Delivery) (inbox.Event, error) {
	ev := inbox.Event{ID: d.MessageId, Type: d.Type, Payload: d.Body, Headers: map[string]string{}}
	var errs []string
	note := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	for k, v := range d.Headers {
		var err error
		switch k {
		case headerAggregateType:
			ev.AggregateType, err = textHeader(k, v)
		case headerAggregateID:
			ev.AggregateID, err = textHeader(k, v)
		case headerAggregateVersion:
			ev.AggregateVersion, err = intHeader(k, v, math.MinInt64, math.MaxInt64)
		case headerSchemaVersion:
			var n int64
			n, err = intHeader(k, v, math.MinInt32, math.MaxInt32)
			ev.SchemaVersion = int32(n)
		case headerCommitLSN:
			ev.CommitLSN, err = lsnHeader(v)
		case headerBackfill:
			ev.Backfill, err = boolHeader(k, v)
		case headerFullState:
			ev.FullState, err = boolHeader(k, v)
		case headerAggregateBucket: // routing only (a partitioned group's): not a user header
		default:
			ev.Headers[k] = headerText(v)
		}
		note(err)
	}
	if len(errs) > 0 {
		return ev, fmt.Errorf("%w: %s", inbox.ErrMalformed, strings.Join(errs, "; "))
	}
	return ev, ev.Validate()
}

func textHeader(k string, v any) (string, error) {
	switch s := v.(type) {
	case string:
		return s, nil
	case []byte:
		return string(s), nil
	}
	return "", fmt.Errorf("header %s is a %T, want a string", k, v)
}

// intHeader accepts every integer type amqp091 decodes a table value into, and decimal strings.
func intHeader(k string, v any, lo, hi int64) (int64, error) {
	var n int64
	switch x := v.(type) {
	case int8:
		n = int64(x)
	case int16:
		n = int64(x)
	case int32:
		n = int64(x)
	case int64:
		n = x
	case int:
		n = int64(x)
	case uint8:
		n = int64(x)
	case uint16:
		n = int64(x)
	case uint32:
		n = int64(x)
	case uint64:
		if x > math.MaxInt64 {
			return 0, fmt.Errorf("header %s = %d is out of range", k, x)
		}
		n = int64(x)
	case string:
		var err error
		if n, err = strconv.ParseInt(strings.TrimSpace(x), 10, 64); err != nil {
			return 0, fmt.Errorf("header %s = %q is not an integer", k, x)
		}
	default:
		return 0, fmt.Errorf("header %s is a %T, want an integer", k, v)
	}
	if n < lo || n > hi {
		return 0, fmt.Errorf("header %s = %d is out of range", k, n)
	}
	return n, nil
}

func lsnHeader(v any) (uint64, error) {
	s, err := textHeader(headerCommitLSN, v)
	if err != nil {
		return 0, err
	}
	l, err := cdc.ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("header %s: %w", headerCommitLSN, err)
	}
	return uint64(l), nil
}

func boolHeader(k string, v any) (bool, error) {
	switch x := v.(type) {
	case bool:
		return x, nil
	case string:
		b, err := strconv.ParseBool(x)
		if err != nil {
			return false, fmt.Errorf("header %s = %q is not a boolean", k, x)
		}
		return b, nil
	}
	return false, fmt.Errorf("header %s is a %T, want a boolean", k, v)
}

// headerText renders a user header value as text: strings as they are, times in RFC 3339, the rest
// with fmt.
func headerText(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339)
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}
