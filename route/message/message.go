package message

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// The header keys the router sets; they win over a user header of the same name.
const (
	HeaderAggregateType    = "aggregate_type"    // string
	HeaderAggregateID      = "aggregate_id"      // string
	HeaderAggregateVersion = "aggregate_version" // int64
	HeaderSchemaVersion    = "schema_version"    // int32
	HeaderCommitLSN        = "commit_lsn"        // string, PostgreSQL's text form
	HeaderBackfill         = "x-backfill"        // bool true, only on backfilled events
	HeaderReplayed         = "x-replayed"        // bool true, only on events quarantine replay published
	HeaderQuarantineID     = "x-quarantine-id"   // int64, the replayed event's quarantine record
	// HeaderReplayedFrom is the time a replayed event was quarantined, in milliseconds since the Unix epoch
	// (int64): a consumer recognises a replay by it, and knows that later versions of the aggregate may
	// have been delivered before it.
	HeaderReplayedFrom = "x-replayed-from-quarantine"
)

// OriginHeaders are the headers that say where a message comes from (a backfill, a quarantine replay).
// Only the router sets them: the same names in a row's own headers (the headers column, amqp.headers.json,
// a mapping's header placements) are dropped, so that a writer cannot make an event look backfilled or
// replayed.
func OriginHeaders() []string {
	return []string{HeaderBackfill, HeaderReplayed, HeaderQuarantineID, HeaderReplayedFrom}
}

// setOrigin replaces the origin headers of h with the event's own: x-backfill on a backfilled event, the
// replay headers on a replayed one, none otherwise.
func setOrigin(h amqp.Table, ev cdc.Event) {
	for _, k := range OriginHeaders() {
		delete(h, k)
	}
	if ev.Backfill {
		h[HeaderBackfill] = true
	}
	if r := ev.Replayed; r != nil {
		h[HeaderReplayed] = true
		h[HeaderQuarantineID] = r.RecordID
		h[HeaderReplayedFrom] = r.QuarantinedAt.UnixMilli()
	}
}

// RoutingKey is the routing key of an event: "<aggregate_type>.<event_type>".
func RoutingKey(ev cdc.Event) string { return ev.AggregateType + "." + ev.EventType }

// build checks ev (as Check does) and maps it to its routing key and AMQP message, converting the
// headers column once.
func Build(ev cdc.Event) (string, amqp.Publishing, error) {
	if ev.Mapped != nil {
		if err := checkMapped(ev); err != nil {
			return "", amqp.Publishing{}, err
		}
		key, msg := mappedMessage(ev)
		return key, msg, nil
	}
	user, err := userHeaders(ev.Headers)
	if err := check(ev, user, err); err != nil {
		return "", amqp.Publishing{}, err
	}
	key, msg := assemble(ev, user)
	return key, msg, nil
}

// message maps an event to its routing key and AMQP message: persistent, message_id = ev.ID,
// type = event_type, timestamp = occurred_at, content type application/json, the payload as the body
// unchanged, and the headers described by the Header* constants on top of the user headers (see
// userHeaders). An event that fails Check gets no user headers.
func Unchecked(ev cdc.Event) (string, amqp.Publishing) {
	if ev.Mapped != nil {
		return mappedMessage(ev)
	}
	user, err := userHeaders(ev.Headers)
	if err != nil {
		user = nil
	}
	return assemble(ev, user)
}

// assemble adds the router's headers to h (the user headers, may be nil) and builds the message.
func assemble(ev cdc.Event, h amqp.Table) (string, amqp.Publishing) {
	if h == nil {
		h = make(amqp.Table, 7)
	}
	h[HeaderAggregateType] = ev.AggregateType
	h[HeaderAggregateID] = ev.AggregateID
	h[HeaderAggregateVersion] = ev.AggregateVersion
	h[HeaderSchemaVersion] = ev.SchemaVersion
	h[HeaderCommitLSN] = ev.CommitLSN.String()
	h[HeaderAggregateBucket] = eventBucket(ev)
	setOrigin(h, ev)
	return RoutingKey(ev), amqp.Publishing{
		Headers:      h,
		ContentType:  "application/json",
		DeliveryMode: amqp.Persistent,
		MessageId:    ev.ID,
		Timestamp:    ev.OccurredAt,
		Type:         ev.EventType,
		Body:         ev.Payload,
	}
}

// noUserHeaders reports whether the headers column holds no header: empty, or the column's default {}.
func noUserHeaders(raw []byte) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || len(raw) == 2 && raw[0] == '{' && raw[1] == '}'
}

// userHeaders converts the headers column (a JSON object as text; empty means none) into an AMQP table:
// string → string, integer → int64 (one beyond int64 → float64), other number → float64 (one beyond
// float64 → its JSON text), boolean → bool, object or array → its compact JSON text, null → left out.
// For a repeated key the last value wins, as in encoding/json.
func userHeaders(raw []byte) (amqp.Table, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, nil
	}
	if len(raw) == 2 && raw[0] == '{' && raw[1] == '}' { // the column's default, on most rows: no decoder
		return make(amqp.Table, 6), nil
	}
	obj, err := userHeaderValues(raw)
	if err != nil {
		return nil, err
	}
	t := make(amqp.Table, len(obj)+6)
	for k, v := range obj {
		if val, ok := headerValue(v); ok {
			t[k] = val
		}
	}
	return t, nil
}

// userHeaderValues parses the headers column (not empty) into its JSON values by name, without converting
// them; a null value is left out, as userHeaders leaves it out.
func userHeaderValues(raw []byte) (map[string]json.RawMessage, error) {
	// Trimmed as userHeaders trims: TrimSpace also drops what JSON does not call space (\f). The raw values
	// keep numbers as their text; Unmarshal refuses data after the object.
	raw = bytes.TrimSpace(raw)
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object: %w", err)
	}
	if obj == nil {
		return nil, errors.New("not a JSON object: null")
	}
	for k, v := range obj {
		if v[0] == 'n' {
			delete(obj, k)
		}
	}
	return obj, nil
}

// headerValue converts one JSON value (valid, as encoding/json checked it) to an AMQP field value; ok is
// false for null.
func headerValue(v json.RawMessage) (any, bool) {
	switch v[0] {
	case 'n':
		return nil, false
	case 't':
		return true, true
	case 'f':
		return false, true
	case '"':
		if bytes.IndexByte(v, '\\') < 0 { // no escapes: the text between the quotes is the string
			return string(v[1 : len(v)-1]), true
		}
		var s string
		_ = json.Unmarshal(v, &s) // valid JSON string
		return s, true
	case '{', '[':
		var b bytes.Buffer
		b.Grow(len(v))
		_ = json.Compact(&b, v) // valid JSON
		return b.String(), true
	}
	n := json.Number(v)
	if i, err := n.Int64(); err == nil {
		return i, true
	}
	if f, err := strconv.ParseFloat(string(n), 64); err == nil {
		return f, true
	}
	return string(n), true
}
