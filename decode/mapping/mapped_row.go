package mapping

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"time"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Header names a mapped event carries besides the key header and the placements.
const (
	HeaderID            = "id"              // the event id, typed (string, or int64 for an integer column)
	HeaderTimestampInMs = "timestamp_in_ms" // int64 milliseconds; AMQP's timestamp property holds seconds
	HeaderSchemaVersion = "schema_version"  // int32, from table.field.event.schema.version
	HeaderTraceparent   = "traceparent"     // W3C trace context from tracing.span.context.field
	HeaderTracestate    = "tracestate"
)

// mappedTuple is one row of a mapped outbox: its relation resolved against the mapping, its values in the
// relation's column order, and its transaction's commit position and time. The stream fills it from an
// Insert (aliasing the WAL buffer), a RowMapper from a row read with SELECT.
type mappedTuple struct {
	rel        *Relation
	tuple      []pgtext.Value
	commitLSN  cdc.LSN
	commitTime time.Time
	fields     []fieldValue // by role, the values of column:field roles (resolveFields); nil: none
}

// mappedValue is one column of the tuple by role: null, or its text.
func (t mappedTuple) mappedValue(i int) (text []byte, oid uint32, ok bool) {
	if t.fields != nil && t.fields[i].set {
		f := t.fields[i]
		return f.text, f.oid, f.ok
	}
	c := t.rel.cols[i]
	if c.pos < 0 || t.tuple[c.pos].Kind != pgtext.KindText {
		return nil, c.oid, false
	}
	return t.tuple[c.pos].Data, c.oid, true
}

// mapTuple maps a tuple of a mapped outbox to an event, streamed or read with SELECT alike. drop is true
// for a tombstone with amqp.tombstone=drop: nothing is published and the row is not quarantined.
func mapTuple(lim *Limits, t mappedTuple) (ev cdc.Event, drop bool, rowErr *pgtext.RowError) {
	rel := t.rel
	m := rel.mapping
	limit := lim.ValueLimit
	for i, c := range rel.cols {
		if c.pos >= 0 && t.tuple[c.pos].Kind == pgtext.KindText && len(t.tuple[c.pos].Data) > limit && i != rolePayload {
			return ev, false, pgtext.RowErrorf("column %s is %d bytes, over the %d-byte limit of a column other than the payload",
				m.roles()[i].column, len(t.tuple[c.pos].Data), limit)
		}
	}
	if t, rowErr = t.resolveFields(); rowErr != nil {
		return ev, false, rowErr
	}
	id, idOID, ok := t.mappedValue(roleID)
	if !ok {
		return ev, false, pgtext.RowErrorf("%s (table.field.event.id) is NULL", m.IDColumn)
	}
	route, _, ok := t.mappedValue(roleRoute)
	if !ok {
		return ev, false, pgtext.RowErrorf("%s (route.by.field) is NULL, so the event has no routing key", m.RouteColumn)
	}
	mapped := &cdc.Mapped{RoutingKey: m.route.key(string(route))}
	ev = cdc.Event{ID: idText(id, idOID), AggregateType: string(route), CommitLSN: t.commitLSN, Mapped: mapped}
	mapped.Headers = append(mapped.Headers, cdc.Header{Name: HeaderID, Value: typedValue(id, idOID)})
	if key, oid, ok := t.mappedValue(roleKey); ok {
		ev.AggregateID = keyText(key, oid)
		mapped.Headers = append(mapped.Headers, cdc.Header{Name: m.KeyHeader, Value: typedValue(key, oid)})
	}
	if typ, _, ok := t.mappedValue(roleType); ok {
		ev.EventType = string(typ)
	}
	if m.TopicTarget == TargetExchange {
		mapped.ByExchange, mapped.Exchange = true, mapped.RoutingKey
		mapped.RoutingKey = m.exchangeRoutingKey(mapped.Exchange, ev.AggregateID)
	}
	ts, rowErr := t.mappedTimestamp()
	if rowErr != nil {
		return cdc.Event{}, false, rowErr
	}
	ev.OccurredAt, mapped.Timestamp = ts, ts
	mapped.Headers = append(mapped.Headers, cdc.Header{Name: HeaderTimestampInMs, Value: ts.UnixMilli()})
	if v, oid, ok := t.mappedValue(roleSchemaVersion); ok {
		mapped.Headers = append(mapped.Headers, cdc.Header{Name: HeaderSchemaVersion, Value: int32Value(typedValue(v, oid))})
	}
	if v, _, ok := t.mappedValue(roleTracing); ok {
		mapped.Headers = append(mapped.Headers, traceHeaders(string(v))...)
	}
	payload, payloadOID, present := t.mappedValue(rolePayload)
	if present && len(payload) > 2*lim.MaxPayloadBytes+2 { // bytea's hex text is twice its size; refuse before decoding
		return cdc.Event{}, false, pgtext.RowErrorf("payload is %d bytes, over the %d-byte limit (--max-payload-bytes)", len(payload), lim.MaxPayloadBytes)
	}
	body, err := payloadBytes(payload, payloadOID, present)
	if err != nil {
		return cdc.Event{}, false, err
	}
	if len(body) > lim.MaxPayloadBytes {
		return cdc.Event{}, false, pgtext.RowErrorf("payload is %d bytes, over the %d-byte limit (--max-payload-bytes)", len(body), lim.MaxPayloadBytes)
	}
	empty := !present || payloadOID != pgtext.OIDBytea && len(bytes.TrimSpace(body)) == 0
	switch {
	case empty && m.TombstoneOnEmpty && m.Tombstone == TombstoneDrop:
		return cdc.Event{}, true, nil
	case empty && m.TombstoneOnEmpty:
		mapped.Tombstone, body = true, nil
	case !present:
		return cdc.Event{}, false, pgtext.RowErrorf("%s (table.field.event.payload) is NULL: AMQP has no null body; write a payload, "+
			"or set route.tombstone.on.empty.payload=true to publish such rows as tombstones", m.PayloadColumn)
	}
	mapped.ContentType = contentType(payloadOID)
	var envelope []envelopeField
	for i, p := range m.Additional {
		v, oid, ok := t.mappedValue(numRoles + i)
		if rel.cols[numRoles+i].pos < 0 {
			continue // absent, with table.field.additional.missing=ignore
		}
		var val any
		if ok {
			val = typedValue(v, oid)
		}
		if p.Where == PlaceHeader {
			if ok {
				mapped.Headers = append(mapped.Headers, cdc.Header{Name: p.Alias, Value: val})
			}
			continue
		}
		if ok && slices.Contains(m.EnvelopeJSON, p.Column) {
			if !json.Valid(v) {
				return cdc.Event{}, false, pgtext.RowErrorf("%s (amqp.envelope.json) is not valid JSON, so it cannot be nested in the envelope", p.Column)
			}
			val = json.RawMessage(v) // nested as is: writeJSON compacts it
		}
		envelope = append(envelope, envelopeField{p.Alias, val})
	}
	raw := body
	if m.envelope() && !mapped.Tombstone {
		body = envelopeBody(body, payloadOID, present, m.ExpandJSON, envelope)
		mapped.ContentType = "application/json"
	}
	if m.ContentType != "" {
		mapped.ContentType = m.ContentType
	}
	if err := t.setProperties(numRoles+len(m.Additional), mapped); err != nil {
		return cdc.Event{}, false, err
	}
	if err := t.setJSONHeaders(mapped); err != nil {
		return cdc.Event{}, false, err
	}
	if err := m.validateJSON(raw, payloadOID, mapped); err != nil {
		return cdc.Event{}, false, err
	}
	ev.Payload = append([]byte(nil), body...)
	if lim.Check != nil {
		if err := lim.Check(ev); err != nil {
			return cdc.Event{}, false, pgtext.CheckFailed(err)
		}
	}
	return ev, false, nil
}

// mappedTimestamp is the event time: the timestamp column (timestamptz; timestamp read as UTC; int8 epoch
// in amqp.timestamp.unit), or the commit time when it is unset or NULL.
func (t mappedTuple) mappedTimestamp() (time.Time, *pgtext.RowError) {
	rel := t.rel
	v, oid, ok := t.mappedValue(roleTimestamp)
	if !ok {
		return t.commitTime.UTC(), nil
	}
	switch oid {
	case pgtext.OIDTimestamptz:
		if t, ok := pgtext.ParseTimestamptz(v); ok {
			return t, nil
		}
	case pgtext.OIDTimestamp:
		if t, err := time.Parse("2006-01-02 15:04:05.999999", string(v)); err == nil {
			return t, nil
		}
	case pgtext.OIDInt8:
		n, status := pgtext.ParseInt(v, 64)
		if status == pgtext.IntOK && rel.mapping.TimestampUnit == "us" {
			return time.UnixMicro(n).UTC(), nil
		}
		if status == pgtext.IntOK {
			return time.UnixMilli(n).UTC(), nil
		}
	}
	return time.Time{}, pgtext.RowErrorf("%s (table.field.event.timestamp) %s is not a time in the range the router reads", rel.mapping.TimestampColumn, pgtext.Quote(v))
}

// typedValue converts a column's text to the header value of its type: int2 → int16, int4 → int32,
// int8 → int64, bool → bool, float4/float8 → float64, bytea → []byte, timestamp(tz) → int64 milliseconds,
// anything else (uuid, text, json, numeric…) → its text.
func typedValue(v []byte, oid uint32) any {
	switch oid {
	case pgtext.OIDInt2, pgtext.OIDInt4, pgtext.OIDInt8:
		if n, status := pgtext.ParseInt(v, 64); status == pgtext.IntOK {
			switch oid {
			case pgtext.OIDInt2:
				return int16(n)
			case pgtext.OIDInt4:
				return int32(n)
			}
			return n
		}
	case pgtext.OIDBool:
		return len(v) == 1 && v[0] == 't'
	case pgtext.OIDFloat4, pgtext.OIDFloat8:
		if f, err := strconv.ParseFloat(string(v), 64); err == nil {
			return f
		}
	case pgtext.OIDBytea:
		if b, err := byteaText(v); err == nil {
			return b
		}
	case pgtext.OIDTimestamptz:
		if t, ok := pgtext.ParseTimestamptz(v); ok {
			return t.UnixMilli()
		}
	case pgtext.OIDTimestamp:
		if t, err := time.Parse("2006-01-02 15:04:05.999999", string(v)); err == nil {
			return t.UnixMilli()
		}
	}
	return string(v)
}

// idText is the message id of an id column's text: the text itself, or for bytea its bytes in lowercase
// hex without PostgreSQL's \x (a message id is a short string; 127 bytes at most fit).
func idText(v []byte, oid uint32) string {
	if oid == pgtext.OIDBytea && bytes.HasPrefix(v, []byte(`\x`)) {
		return string(v[2:])
	}
	return string(v)
}

// keyText is the ordering key of a key column's text: the text itself, or for bytea its bytes, so that the
// lane follows the key's bytes (as Debezium's binary message key does).
func keyText(v []byte, oid uint32) string {
	if oid == pgtext.OIDBytea {
		if b, err := byteaText(v); err == nil {
			return string(b)
		}
	}
	return string(v)
}

func int32Value(v any) int32 {
	switch n := v.(type) {
	case int16:
		return int32(n)
	case int32:
		return n
	}
	return 0
}

// byteaText decodes bytea's hex output format (\x…), which the replication connection's bytea_output
// default gives.
func byteaText(v []byte) ([]byte, error) {
	if !bytes.HasPrefix(v, []byte(`\x`)) {
		return nil, strconv.ErrSyntax
	}
	out := make([]byte, hex.DecodedLen(len(v)-2))
	_, err := hex.Decode(out, v[2:])
	return out, err
}

// payloadBytes is the body of a payload column: its text, or bytea's bytes.
func payloadBytes(v []byte, oid uint32, present bool) ([]byte, *pgtext.RowError) {
	if !present || oid != pgtext.OIDBytea {
		return v, nil
	}
	b, err := byteaText(v)
	if err != nil {
		return nil, pgtext.RowErrorf("payload is not in bytea's hex format (set bytea_output = hex)")
	}
	return b, nil
}

// contentType follows the payload column's type.
func contentType(oid uint32) string {
	switch oid {
	case pgtext.OIDJSONB, pgtext.OIDJSON:
		return "application/json"
	case pgtext.OIDBytea:
		return "application/octet-stream"
	}
	return "text/plain; charset=utf-8"
}

// traceHeaders reads a java.util.Properties text (traceparent=…, tracestate=…) into headers.
func traceHeaders(text string) []cdc.Header {
	var out []cdc.Header
	for _, p := range parseProperties(text) {
		if (p.key == HeaderTraceparent || p.key == HeaderTracestate) && p.value != "" {
			out = append(out, cdc.Header{Name: p.key, Value: p.value})
		}
	}
	return out
}

type envelopeField struct {
	alias string
	value any
}

// envelopeBody is {"payload": P, alias: value, …} in configuration order. P is the payload's JSON when
// expand is set and it parses (json/jsonb, or text holding JSON), otherwise a JSON string (bytea: base64).
func envelopeBody(payload []byte, oid uint32, present, expand bool, fields []envelopeField) []byte {
	var b bytes.Buffer
	b.WriteString(`{"payload":`)
	switch {
	case !present:
		b.WriteString("null")
	case oid == pgtext.OIDBytea:
		writeJSON(&b, payload) // []byte marshals as base64
	case expand && json.Valid(payload):
		_ = json.Compact(&b, payload)
	default:
		writeJSON(&b, string(payload))
	}
	for _, f := range fields {
		b.WriteByte(',')
		writeJSON(&b, f.alias)
		b.WriteByte(':')
		writeJSON(&b, f.value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

func writeJSON(b *bytes.Buffer, v any) {
	if s, ok := v.([]byte); ok {
		v = base64.StdEncoding.EncodeToString(s)
	}
	enc, err := json.Marshal(v)
	if err != nil { // a NaN or infinite float
		enc = []byte("null")
	}
	b.Write(enc)
}
