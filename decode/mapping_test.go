package decode

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// mcol is one column of a mapped test table: name, type OID and the inserted value.
type mcol struct {
	name string
	oid  uint32
	v    tv
}

// debeziumRow is a row of Debezium's conventional outbox table.
func debeziumRow() []mcol {
	return []mcol{{"id", oidUUID, text(id1)}, {"aggregatetype", oidVarchar, text("Order")},
		{"aggregateid", oidText, text("o-1")}, {"type", oidText, text("OrderCreated")},
		{"payload", oidJSONB, text(`{"total": 12.5}`)}}
}

// with replaces the column of that name, or appends it.
func with(row []mcol, c mcol) []mcol {
	out := append([]mcol(nil), row...)
	for i := range out {
		if out[i].name == c.name {
			out[i] = c
			return out
		}
	}
	return append(out, c)
}

func without(row []mcol, name string) []mcol {
	var out []mcol
	for _, c := range row {
		if c.name != name {
			out = append(out, c)
		}
	}
	return out
}

// commitTime is the commit time encBegin writes.
var commitTime = time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)

// decodeMapped decodes one transaction inserting row into public.outbox read through the mapping text.
func decodeMapped(t *testing.T, mapping string, row []mcol, onDrift string) (*recorder, error) {
	t.Helper()
	m, err := parseMapping(mapping)
	if err != nil {
		t.Fatalf("ParseMapping: %v", err)
	}
	names, types, values := make([]string, len(row)), make([]uint32, len(row)), make([]tv, len(row))
	for i, c := range row {
		names[i], types[i], values[i] = c.name, c.oid, c.v
	}
	const oid = 16390
	return decodeFrames(Config{Mapping: m, OnDrift: onDrift}, []frame{{0x100, encBegin(0x200, 7)},
		{0, encRelationTypes(oid, "public", "outbox", names, types)}, {0x110, encInsert(oid, values...)},
		{0x210, encCommit(0x200, 0x210)}})
}

// mappedEvent decodes and returns the one event, failing on anything else.
func mappedEvent(t *testing.T, mapping string, row []mcol) cdc.Event {
	t.Helper()
	rec, err := decodeMapped(t, mapping, row, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.events) != 1 {
		t.Fatalf("want one event, got %v", rec.shape)
	}
	return rec.events[0]
}

// header returns the value of the last header of that name (the one AMQP keeps), or nil.
func header(ev cdc.Event, name string) any {
	var v any
	for _, h := range ev.Mapped.Headers {
		if h.Name == name {
			v = h.Value
		}
	}
	return v
}

func TestMappingDefaults(t *testing.T) {
	ev := mappedEvent(t, "", debeziumRow())
	m := ev.Mapped
	want := []cdc.Header{{Name: "id", Value: id1}, {Name: "key", Value: "o-1"}, {Name: "timestamp_in_ms", Value: commitTime.UnixMilli()}}
	if !reflect.DeepEqual(m.Headers, want) {
		t.Errorf("headers %v, want %v", m.Headers, want)
	}
	if m.RoutingKey != "outbox.event.Order" || ev.ID != id1 || ev.EventType != "OrderCreated" ||
		string(ev.Payload) != `{"total": 12.5}` || m.ContentType != "application/json" || !m.Timestamp.Equal(commitTime) ||
		m.Tombstone || ev.AggregateType != "Order" || ev.AggregateID != "o-1" || ev.CommitLSN != 0x200 {
		t.Errorf("event %+v mapped %+v", ev, m)
	}
}

func TestMappingOptions(t *testing.T) {
	row := debeziumRow()
	tests := []struct {
		name    string
		mapping string
		row     []mcol
		check   func(t *testing.T, ev cdc.Event)
	}{
		{"table.field.event.id integer", "table.field.event.id=event_id", with(without(row, "id"), mcol{"event_id", oidInt8, text("42")}),
			func(t *testing.T, ev cdc.Event) {
				if ev.ID != "42" || header(ev, "id") != int64(42) {
					t.Errorf("id %q header %#v", ev.ID, header(ev, "id"))
				}
			}},
		{"table.field.event.key and amqp.key.header", "table.field.event.key=customer_id\namqp.key.header=customer",
			with(row, mcol{"customer_id", oidInt4, text("7")}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "customer") != int32(7) || header(ev, "key") != nil || ev.AggregateID != "7" {
					t.Errorf("headers %v lane key %q", ev.Mapped.Headers, ev.AggregateID)
				}
			}},
		{"table.field.event.id bytea: message id in hex, header id the bytes", "table.field.event.id=event_id",
			with(without(row, "id"), mcol{"event_id", oidBytea, text(`\x00ff10ab`)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.ID != "00ff10ab" || !reflect.DeepEqual(header(ev, "id"), []byte{0, 0xff, 0x10, 0xab}) {
					t.Errorf("id %q header %#v", ev.ID, header(ev, "id"))
				}
			}},
		{"table.field.event.key bytea: lane by the bytes, header the bytes", "table.field.event.key=k",
			with(row, mcol{"k", oidBytea, text(`\x00ff`)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.AggregateID != "\x00\xff" || !reflect.DeepEqual(header(ev, "key"), []byte{0, 0xff}) {
					t.Errorf("lane key %q header %#v", ev.AggregateID, header(ev, "key"))
				}
			}},
		{"table.field.event.id uuid, key int8", "table.field.event.key=k", with(row, mcol{"k", oidInt8, text("-9")}),
			func(t *testing.T, ev cdc.Event) {
				if ev.ID != id1 || header(ev, "id") != id1 || ev.AggregateID != "-9" || header(ev, "key") != int64(-9) {
					t.Errorf("id %q %#v key %q %#v", ev.ID, header(ev, "id"), ev.AggregateID, header(ev, "key"))
				}
			}},
		{"table.field.event.id text, key uuid", "table.field.event.id=t\ntable.field.event.key=u",
			with(with(row, mcol{"t", oidText, text("evt-1")}), mcol{"u", oidUUID, text(id1)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.ID != "evt-1" || header(ev, "id") != "evt-1" || ev.AggregateID != id1 || header(ev, "key") != id1 {
					t.Errorf("id %q %#v key %q %#v", ev.ID, header(ev, "id"), ev.AggregateID, header(ev, "key"))
				}
			}},
		{"table.field.event.key empty: no key", "table.field.event.key=", without(row, "aggregateid"),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "key") != nil || ev.AggregateID != "" {
					t.Errorf("headers %v lane key %q", ev.Mapped.Headers, ev.AggregateID)
				}
			}},
		{"table.field.event.key NULL", "", with(row, mcol{"aggregateid", oidText, null()}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "key") != nil {
					t.Errorf("a NULL key gives no header, got %v", ev.Mapped.Headers)
				}
			}},
		{"table.field.event.payload bytea", "table.field.event.payload=body", with(without(row, "payload"), mcol{"body", oidBytea, text(`\x00ff41`)}),
			func(t *testing.T, ev cdc.Event) {
				if string(ev.Payload) != "\x00\xffA" || ev.Mapped.ContentType != "application/octet-stream" {
					t.Errorf("body %q content type %q", ev.Payload, ev.Mapped.ContentType)
				}
			}},
		{"payload text", "", with(row, mcol{"payload", oidText, text("hello")}),
			func(t *testing.T, ev cdc.Event) {
				if string(ev.Payload) != "hello" || ev.Mapped.ContentType != "text/plain; charset=utf-8" {
					t.Errorf("body %q content type %q", ev.Payload, ev.Mapped.ContentType)
				}
			}},
		{"amqp.content.type", "amqp.content.type=application/vnd.acme+json", row,
			func(t *testing.T, ev cdc.Event) {
				if ev.Mapped.ContentType != "application/vnd.acme+json" {
					t.Errorf("content type %q", ev.Mapped.ContentType)
				}
			}},
		{"table.field.event.timestamp timestamptz", "table.field.event.timestamp=created_at",
			with(row, mcol{"created_at", oidTimestamptz, text("2025-03-04 05:06:07.891+02")}),
			func(t *testing.T, ev cdc.Event) {
				want := time.Date(2025, 3, 4, 3, 6, 7, 891e6, time.UTC)
				if !ev.Mapped.Timestamp.Equal(want) || header(ev, "timestamp_in_ms") != want.UnixMilli() {
					t.Errorf("timestamp %v header %v", ev.Mapped.Timestamp, header(ev, "timestamp_in_ms"))
				}
			}},
		{"table.field.event.timestamp timestamp", "table.field.event.timestamp=created_at",
			with(row, mcol{"created_at", oidTimestamp, text("2025-03-04 05:06:07")}),
			func(t *testing.T, ev cdc.Event) {
				if want := time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC); !ev.Mapped.Timestamp.Equal(want) {
					t.Errorf("timestamp %v, want %v (read as UTC)", ev.Mapped.Timestamp, want)
				}
			}},
		{"table.field.event.timestamp epoch ms", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidInt8, text("1700000000123")}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "timestamp_in_ms") != int64(1700000000123) {
					t.Errorf("timestamp_in_ms %v", header(ev, "timestamp_in_ms"))
				}
			}},
		{"table.field.event.timestamp epoch us", "table.field.event.timestamp=ts\namqp.timestamp.unit=us", with(row, mcol{"ts", oidInt8, text("1700000000123456")}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "timestamp_in_ms") != int64(1700000000123) {
					t.Errorf("timestamp_in_ms %v", header(ev, "timestamp_in_ms"))
				}
			}},
		{"table.field.event.timestamp NULL is the commit time", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidTimestamptz, null()}),
			func(t *testing.T, ev cdc.Event) {
				if !ev.Mapped.Timestamp.Equal(commitTime) {
					t.Errorf("timestamp %v, want the commit time", ev.Mapped.Timestamp)
				}
			}},
		{"table.field.event.type", "table.field.event.type=event_type", with(without(row, "type"), mcol{"event_type", oidText, text("Shipped")}),
			func(t *testing.T, ev cdc.Event) {
				if ev.EventType != "Shipped" {
					t.Errorf("type %q", ev.EventType)
				}
			}},
		{"no type column", "", without(row, "type"),
			func(t *testing.T, ev cdc.Event) {
				if ev.EventType != "" {
					t.Errorf("type %q", ev.EventType)
				}
			}},
		{"table.field.event.type unset, a bytea type column is unused", "", with(row, mcol{"type", oidBytea, text(`\x01`)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.EventType != "" {
					t.Errorf("type %q from a bytea column the options never named", ev.EventType)
				}
			}},
		{"tracing.span.context.field unset, a jsonb column of that name is unused", "",
			with(row, mcol{"tracingspancontext", oidJSONB, text(`{"traceparent": "x"}`)}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "traceparent") != nil {
					t.Errorf("headers %v", ev.Mapped.Headers)
				}
			}},
		{"table.field.event.type switched off", "table.field.event.type=", row,
			func(t *testing.T, ev cdc.Event) {
				if ev.EventType != "" {
					t.Errorf("type %q with the option switched off", ev.EventType)
				}
			}},
		{"tracing.span.context.field switched off", "tracing.span.context.field=",
			with(row, mcol{"tracingspancontext", oidVarchar, text("traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "traceparent") != nil {
					t.Errorf("headers %v", ev.Mapped.Headers)
				}
			}},
		{"table.field.event.timestamp empty is unset", "table.field.event.timestamp=", row,
			func(t *testing.T, ev cdc.Event) {
				if !ev.Mapped.Timestamp.Equal(commitTime) {
					t.Errorf("timestamp %v, want the commit time", ev.Mapped.Timestamp)
				}
			}},
		{"key, route and type from JSON fields", "table.field.event.key=hdrs:PARTITION_ID\nroute.by.field=meta:dest\ntable.field.event.type=hdrs:event-type",
			with(with(row, mcol{"hdrs", oidText, text(`{"PARTITION_ID": "o-\u0031", "event-type": "Created"}`)}), mcol{"meta", oidJSONB, text(`{"dest": "Order"}`)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.AggregateID != "o-1" || header(ev, "key") != "o-1" || ev.Mapped.RoutingKey != "outbox.event.Order" || ev.EventType != "Created" {
					t.Errorf("key %q %#v routing key %q type %q", ev.AggregateID, header(ev, "key"), ev.Mapped.RoutingKey, ev.EventType)
				}
			}},
		{"an integer key field", "table.field.event.key=hdrs:n", with(row, mcol{"hdrs", oidJSON, text(`{"n": 42}`)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.AggregateID != "42" || header(ev, "key") != int64(42) {
					t.Errorf("key %q %#v", ev.AggregateID, header(ev, "key"))
				}
			}},
		{"a JSON null key field is no key", "table.field.event.key=hdrs:n", with(row, mcol{"hdrs", oidJSON, text(`{"n": null}`)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.AggregateID != "" || header(ev, "key") != nil {
					t.Errorf("key %q %#v", ev.AggregateID, header(ev, "key"))
				}
			}},
		{"amqp.envelope.json nests a JSON text column", "table.fields.additional.placement=hdrs:envelope:headers,type:envelope\namqp.envelope.json=hdrs",
			with(row, mcol{"hdrs", oidText, text(`{"ID": "m-1",  "n": [1, 2]}`)}),
			func(t *testing.T, ev cdc.Event) {
				if want := `{"payload":"{\"total\": 12.5}","headers":{"ID":"m-1","n":[1,2]},"type":"OrderCreated"}`; string(ev.Payload) != want {
					t.Errorf("body %s, want %s", ev.Payload, want)
				}
			}},
		{"amqp.headers.json", "amqp.headers.json=hdrs", with(row, mcol{"hdrs", oidText, text(`{"PARTITION_ID": "o-1"}`)}),
			func(t *testing.T, ev cdc.Event) {
				if string(ev.Mapped.JSONHeaders) != `{"PARTITION_ID": "o-1"}` {
					t.Errorf("JSON headers %q", ev.Mapped.JSONHeaders)
				}
			}},
		{"amqp.headers.json NULL", "amqp.headers.json=hdrs", with(row, mcol{"hdrs", oidJSONB, null()}),
			func(t *testing.T, ev cdc.Event) {
				if ev.Mapped.JSONHeaders != nil {
					t.Errorf("JSON headers %q", ev.Mapped.JSONHeaders)
				}
			}},
		{"amqp.property columns", "amqp.property.content_type=ct\namqp.property.correlation_id=corr\namqp.property.reply_to=rt\n" +
			"amqp.property.content_encoding=enc\namqp.property.app_id=app",
			with(with(with(with(with(row, mcol{"ct", oidText, text("application/vnd.masstransit+json")}),
				mcol{"corr", oidUUID, text(id1)}), mcol{"rt", oidVarchar, text("rabbitmq://h/v/replies")}),
				mcol{"enc", oidText, text("gzip")}), mcol{"app", oidText, text("billing")}),
			func(t *testing.T, ev cdc.Event) {
				m := ev.Mapped
				if m.ContentType != "application/vnd.masstransit+json" || m.CorrelationID != id1 || m.ReplyTo != "rabbitmq://h/v/replies" ||
					m.ContentEncoding != "gzip" || m.AppID != "billing" {
					t.Errorf("properties %q %q %q %q %q", m.ContentType, m.CorrelationID, m.ReplyTo, m.ContentEncoding, m.AppID)
				}
			}},
		{"amqp.property NULL keeps the table-wide value", "amqp.property.content_type=ct\namqp.property.correlation_id=corr\namqp.content.type=application/json",
			with(with(row, mcol{"ct", oidText, null()}), mcol{"corr", oidText, null()}),
			func(t *testing.T, ev cdc.Event) {
				if ev.Mapped.ContentType != "application/json" || ev.Mapped.CorrelationID != "" {
					t.Errorf("content type %q correlation id %q", ev.Mapped.ContentType, ev.Mapped.CorrelationID)
				}
			}},
		{"amqp.validate.json passes valid text JSON", "amqp.content.type=application/json\namqp.validate.json=true",
			with(row, mcol{"payload", oidText, text(` {"a": [1, 2.5e3, "\u00e9"]} `)}),
			func(t *testing.T, ev cdc.Event) {
				if string(ev.Payload) != ` {"a": [1, 2.5e3, "\u00e9"]} ` {
					t.Errorf("body %q", ev.Payload)
				}
			}},
		{"amqp.validate.json leaves text/plain alone", "amqp.validate.json=true", with(row, mcol{"payload", oidText, text("hello")}),
			func(t *testing.T, ev cdc.Event) {
				if string(ev.Payload) != "hello" || ev.Mapped.ContentType != "text/plain; charset=utf-8" {
					t.Errorf("body %q content type %q", ev.Payload, ev.Mapped.ContentType)
				}
			}},
		{"amqp.validate.json off publishes text that is not JSON", "amqp.content.type=application/json",
			with(row, mcol{"payload", oidText, text(`{"a":`)}),
			func(t *testing.T, ev cdc.Event) {
				if string(ev.Payload) != `{"a":` {
					t.Errorf("body %q", ev.Payload)
				}
			}},
		{"amqp.validate.json exempts a tombstone", "amqp.content.type=application/json\namqp.validate.json=true\nroute.tombstone.on.empty.payload=true",
			with(row, mcol{"payload", oidText, text("  ")}),
			func(t *testing.T, ev cdc.Event) {
				if !ev.Mapped.Tombstone {
					t.Errorf("not a tombstone")
				}
			}},
		{"table.field.event.schema.version", "table.field.event.schema.version=v", with(row, mcol{"v", oidInt2, text("3")}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "schema_version") != int32(3) {
					t.Errorf("schema_version %#v", header(ev, "schema_version"))
				}
			}},
		{"placement header", "table.fields.additional.placement=type:header:eventType, flag:header, n:header, id:header",
			with(with(row, mcol{"flag", oidBool, text("t")}), mcol{"n", oidInt8, null()}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "eventType") != "OrderCreated" || header(ev, "flag") != true || header(ev, "n") != nil || header(ev, "id") != id1 {
					t.Errorf("headers %v", ev.Mapped.Headers)
				}
			}},
		{"placement envelope", "table.fields.additional.placement=type:envelope:eventType,aggregateid:envelope,n:envelope",
			with(row, mcol{"n", oidInt4, null()}),
			func(t *testing.T, ev cdc.Event) {
				want := `{"payload":"{\"total\": 12.5}","eventType":"OrderCreated","aggregateid":"o-1","n":null}`
				if string(ev.Payload) != want || ev.Mapped.ContentType != "application/json" {
					t.Errorf("body %s, want %s", ev.Payload, want)
				}
			}},
		{"placement envelope with table.expand.json.payload", "table.fields.additional.placement=type:envelope:eventType\ntable.expand.json.payload=true", row,
			func(t *testing.T, ev cdc.Event) {
				if want := `{"payload":{"total":12.5},"eventType":"OrderCreated"}`; string(ev.Payload) != want {
					t.Errorf("body %s, want %s", ev.Payload, want)
				}
			}},
		{"table.expand.json.payload alone keeps the body", "table.expand.json.payload=true", row,
			func(t *testing.T, ev cdc.Event) {
				if string(ev.Payload) != `{"total": 12.5}` {
					t.Errorf("body %s", ev.Payload)
				}
			}},
		{"envelope with bytea payload", "table.fields.additional.placement=type:envelope", with(row, mcol{"payload", oidBytea, text(`\x4869`)}),
			func(t *testing.T, ev cdc.Event) {
				if want := `{"payload":"SGk=","type":"OrderCreated"}`; string(ev.Payload) != want {
					t.Errorf("body %s, want %s", ev.Payload, want)
				}
			}},
		{"table.field.additional.missing=ignore", "table.fields.additional.placement=absent:header\ntable.field.additional.missing=ignore", row,
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "absent") != nil {
					t.Errorf("headers %v", ev.Mapped.Headers)
				}
			}},
		{"route.by.field, regex and replacement", "route.by.field=topic\nroute.topic.regex=orders\\\\.(?<what>.*)\nroute.topic.replacement=svc.${what}.$1\\\\$",
			with(row, mcol{"topic", oidText, text("orders.created")}),
			func(t *testing.T, ev cdc.Event) {
				if ev.Mapped.RoutingKey != "svc.created.created$" {
					t.Errorf("routing key %q", ev.Mapped.RoutingKey)
				}
			}},
		{"route.topic.regex must match the whole value, else the raw value", "route.by.field=topic\nroute.topic.regex=orders\nroute.topic.replacement=x",
			with(row, mcol{"topic", oidText, text("orders.created")}),
			func(t *testing.T, ev cdc.Event) {
				if ev.Mapped.RoutingKey != "orders.created" {
					t.Errorf("routing key %q", ev.Mapped.RoutingKey)
				}
			}},
		{"route.tombstone.on.empty.payload NULL", "route.tombstone.on.empty.payload=true", with(row, mcol{"payload", oidJSONB, null()}),
			func(t *testing.T, ev cdc.Event) {
				if !ev.Mapped.Tombstone || len(ev.Payload) != 0 || header(ev, "id") != id1 || ev.Mapped.RoutingKey != "outbox.event.Order" {
					t.Errorf("event %+v mapped %+v", ev, ev.Mapped)
				}
			}},
		{"route.tombstone.on.empty.payload blank text", "route.tombstone.on.empty.payload=true", with(row, mcol{"payload", oidText, text("  ")}),
			func(t *testing.T, ev cdc.Event) {
				if !ev.Mapped.Tombstone || len(ev.Payload) != 0 {
					t.Errorf("event %+v mapped %+v", ev, ev.Mapped)
				}
			}},
		{"an empty bytea is no tombstone", "route.tombstone.on.empty.payload=true", with(row, mcol{"payload", oidBytea, text(`\x`)}),
			func(t *testing.T, ev cdc.Event) {
				if ev.Mapped.Tombstone || len(ev.Payload) != 0 {
					t.Errorf("event %+v mapped %+v", ev, ev.Mapped)
				}
			}},
		{"tracing.span.context.field", "", with(row, mcol{"tracingspancontext", oidText,
			text("#Thu Jan 01 00:00:00 UTC 2024\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\ntracestate=congo\\=t61rcWkgMzE\n")}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "traceparent") != "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01" || header(ev, "tracestate") != "congo=t61rcWkgMzE" {
					t.Errorf("headers %v", ev.Mapped.Headers)
				}
			}},
		{"tracing column NULL", "", with(row, mcol{"tracingspancontext", oidText, null()}),
			func(t *testing.T, ev cdc.Event) {
				if header(ev, "traceparent") != nil {
					t.Errorf("headers %v", ev.Mapped.Headers)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.check(t, mappedEvent(t, tt.mapping, tt.row)) })
	}
}

func TestMappingTombstoneDrop(t *testing.T) {
	rec, err := decodeMapped(t, "route.tombstone.on.empty.payload=true\namqp.tombstone=drop", with(debeziumRow(), mcol{"payload", oidJSONB, null()}), "")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(rec.shape, "|") != "B|C" {
		t.Errorf("want the transaction without an event or quarantine, got %v", rec.shape)
	}
}

func TestMappingQuarantinesRows(t *testing.T) {
	row := debeziumRow()
	tests := []struct {
		name, mapping string
		row           []mcol
		reason        string
	}{
		{"NULL routing value", "", with(row, mcol{"aggregatetype", oidVarchar, null()}), "aggregatetype (route.by.field) is NULL, so the event has no routing key"},
		{"NULL payload without tombstones", "", with(row, mcol{"payload", oidJSONB, null()}), "payload (table.field.event.payload) is NULL: AMQP has no null body"},
		{"NULL id", "", with(row, mcol{"id", oidUUID, null()}), "id (table.field.event.id) is NULL"},
		{"amqp.validate.json, text payload sent as JSON", "amqp.content.type=application/json; charset=utf-8\namqp.validate.json=true",
			with(row, mcol{"payload", oidText, text(`{"a":`)}), "payload is not valid JSON (amqp.validate.json), though the message's content type is application/json; charset=utf-8"},
		{"amqp.validate.json, varchar payload in a +json type", "amqp.content.type=application/vnd.acme+json\namqp.validate.json=true",
			with(row, mcol{"payload", oidVarchar, text(`not json`)}), "payload is not valid JSON (amqp.validate.json)"},
		{"amqp.validate.json, bytea payload in an envelope", "amqp.validate.json=true\ntable.fields.additional.placement=type:envelope",
			with(row, mcol{"payload", oidBytea, text(`\x7b`)}), "payload is not valid JSON (amqp.validate.json), though the message's content type is application/json"},
		{"key field missing", "table.field.event.key=hdrs:PARTITION_ID", with(row, mcol{"hdrs", oidText, text(`{"x": 1}`)}),
			`hdrs (table.field.event.key=hdrs:PARTITION_ID) has no field "PARTITION_ID"`},
		{"route field of a column that is not JSON", "route.by.field=hdrs:dest", with(row, mcol{"hdrs", oidText, text(`dest=Order`)}),
			"hdrs (route.by.field=hdrs:dest) is not a JSON object"},
		{"key field that is an object", "table.field.event.key=hdrs:k", with(row, mcol{"hdrs", oidText, text(`{"k": {"a": 1}}`)}),
			`hdrs (table.field.event.key=hdrs:k) holds "{\"a\": 1}" in field "k", not a string or an integer within int64`},
		{"route field NULL", "route.by.field=hdrs:dest", with(row, mcol{"hdrs", oidText, text(`{"dest": null}`)}),
			"hdrs (route.by.field) is NULL, so the event has no routing key"},
		{"amqp.envelope.json column that is not JSON", "table.fields.additional.placement=hdrs:envelope\namqp.envelope.json=hdrs",
			with(row, mcol{"hdrs", oidText, text(`ID=m-1`)}), "hdrs (amqp.envelope.json) is not valid JSON, so it cannot be nested in the envelope"},
		{"amqp.headers.json text that is not an object", "amqp.headers.json=hdrs", with(row, mcol{"hdrs", oidText, text(`["a"]`)}),
			"hdrs (amqp.headers.json) is not a JSON object, so it cannot become headers"},
		{"amqp.headers.json text that is not JSON", "amqp.headers.json=hdrs", with(row, mcol{"hdrs", oidVarchar, text(`{"a":`)}),
			"hdrs (amqp.headers.json) is not a JSON object"},
		{"amqp.property over 255 bytes", "amqp.property.correlation_id=corr", with(row, mcol{"corr", oidText, text(strings.Repeat("c", 256))}),
			"corr (amqp.property.correlation_id) is 256 bytes, AMQP allows 255 for a property"},
		{"amqp.validate.json follows the row's content type", "amqp.property.content_type=ct\namqp.validate.json=true",
			with(with(row, mcol{"payload", oidText, text("{")}), mcol{"ct", oidText, text("application/json")}),
			"payload is not valid JSON (amqp.validate.json), though the message's content type is application/json"},
		{"bad epoch", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidInt8, text("x")}), `ts (table.field.event.timestamp) "x" is not a time`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := decodeMapped(t, tt.mapping, tt.row, "")
			if err != nil {
				t.Fatal(err)
			}
			if len(rec.events) != 0 || len(rec.quarantined) != 1 || !strings.Contains(rec.quarantined[0].Reason, tt.reason) {
				t.Fatalf("want one quarantine with %q, got %v", tt.reason, rec.shape)
			}
		})
	}
}

// A table that does not fit the mapping is refused at its first insert, naming the option; with
// --on-drift=quarantine each insert is quarantined with the same reason.
func TestMappingDrift(t *testing.T) {
	row := debeziumRow()
	tests := []struct {
		name, mapping string
		row           []mcol
		problem       string
	}{
		{"missing payload", "table.field.event.payload=body", row, "column body (table.field.event.payload) is missing"},
		{"payload of another type", "", with(row, mcol{"payload", oidInt4, text("1")}), "column payload (table.field.event.payload) is int4, want jsonb, json, text, varchar or bytea"},
		{"missing route column", "route.by.field=topic", row, "column topic (route.by.field) is missing"},
		{"missing placed column", "table.fields.additional.placement=absent:header", row, "column absent (table.fields.additional.placement) is missing"},
		{"missing tracing column named explicitly", "tracing.span.context.field=trace", row, "column trace (tracing.span.context.field) is missing"},
		{"missing timestamp column", "table.field.event.timestamp=ts", row, "column ts (table.field.event.timestamp) is missing"},
		{"JSON field of a column of another type", "table.field.event.key=aggregateid:k", with(row, mcol{"aggregateid", oidInt4, text("1")}),
			"column aggregateid (table.field.event.key) is int4, want jsonb, json, text or varchar"},
		{"a column named in another case", "table.field.event.key=AggregateId", row,
			"column AggregateId (table.field.event.key) is missing (the table has a column aggregateid: names are case-sensitive; write table.field.event.key=aggregateid)"},
		{"type column of another type named explicitly", "table.field.event.type=type", with(row, mcol{"type", oidBytea, text(`\x01`)}),
			"column type (table.field.event.type) is bytea, want text or varchar"},
		{"tracing column of another type named explicitly", "tracing.span.context.field=tracingspancontext",
			with(row, mcol{"tracingspancontext", oidJSONB, text("{}")}), "column tracingspancontext (tracing.span.context.field) is jsonb, want text or varchar"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeMapped(t, tt.mapping, tt.row, "")
			t.Log(err)
			var drift *DriftError
			if !errors.As(err, &drift) || drift.Problem != tt.problem || !strings.Contains(err.Error(), "--config file") {
				t.Fatalf("want a DriftError %q naming the --config file, got %v", tt.problem, err)
			}
			rec, err := decodeMapped(t, tt.mapping, tt.row, OnDriftQuarantine)
			if err != nil || len(rec.quarantined) != 1 || rec.quarantined[0].Reason != tt.problem {
				t.Fatalf("with quarantine: %v %v", err, rec.shape)
			}
		})
	}
}

func TestParseMappingRefuses(t *testing.T) {
	tests := []struct{ text, want string }{
		{"table.fields.additional.placement=type:partition", "the partition placement has no AMQP meaning"},
		{"table.fields.additional.placement=type:body", `placement "body" must be header or envelope`},
		{"table.fields.additional.placement=type", "must be column:placement or column:placement:alias"},
		{"route.topic.regex=(?=x).*", "route.topic.regex \"(?=x).*\" uses a lookahead (?=…), which Go's RE2 engine does not support"},
		{`route.topic.regex=(a)\\1`, `uses a backreference \1`},
		{"route.topic.regex=a*+", "a possessive quantifier *+"},
		{"route.topic.regex=[a-z&&[^b]]", "a character class intersection &&"},
		{"route.topic.regex=(", "is not a regex Go's RE2 engine accepts"},
		{"route.topic.replacement=x.${nope}", "names the group ${nope}, which route.topic.regex does not define"},
		{"route.topic.replacement=x.$2", "refers to group $2 but route.topic.regex has 1 groups"},
		{"route.topic.replacement=x$", "has a $ not followed by a group number"},
		{"route.tombstone.on.empty.payload=yes", "use true or false"},
		{"table.op.invalid.behavior=fatal", "table.op.invalid.behavior=fatal is not supported"},
		{"table.json.payload.null.behavior=optional_bytes", "only the default ignore applies"},
		{"amqp.tombstone=null", `amqp.tombstone="null": use empty-body or drop`},
		{"amqp.topic.target=queue", `amqp.topic.target="queue": use routing-key or exchange`},
		{"amqp.routing.key=k", "line 1: amqp.routing.key applies only with amqp.topic.target=exchange"},
		{"amqp.routing.key.source=key", "line 1: amqp.routing.key.source applies only with amqp.topic.target=exchange"},
		{"amqp.topic.target=exchange\namqp.routing.key.source=key\namqp.routing.key=k", "line 3: amqp.routing.key applies only with amqp.routing.key.source=static"},
		{"amqp.topic.target=exchange\namqp.routing.key.source=key\ntable.field.event.key=", "line 2: amqp.routing.key.source=key needs a key column"},
		{"amqp.topic.target=exchange\namqp.routing.key.source=partition", `use static, key or topic`},
		{"amqp.topic.target=exchange\namqp.routing.key=" + strings.Repeat("k", 256), "amqp.routing.key is 256 bytes, AMQP allows 255"},
		{"route.by.feild=x", `unknown option "route.by.feild"`},
		{"route.by.field=a\nroute.by.field=b", "line 2: route.by.field is also set on line 1"},
		{"table.field.event.id=", "table.field.event.id is empty: name a column of the outbox table (this option cannot be switched off)"},
		{"route.by.field=", "route.by.field is empty"},
		{"table.field.event.id=hdrs:id", "the id cannot be a field of a JSON column"},
		{"table.field.event.key=:PARTITION_ID", "write column:field"},
		{"amqp.headers.json=", "amqp.headers.json is empty"},
		{"table.fields.additional.placement=hdrs:header\namqp.envelope.json=hdrs", "line 2: amqp.envelope.json names hdrs, which no table.fields.additional.placement item places in the envelope"},
		{"amqp.property.type=t", "the type property comes from table.field.event.type"},
		{"amqp.property.user_id=u", "amqp.property.user_id is not supported"},
		{"amqp.property.priority=p", `unknown option "amqp.property.priority": amqp.property.<name> sets the property of that name per row, for content_type`},
		{"amqp.property.reply_to=", "amqp.property.reply_to is empty"},
		{"amqp.property.reply_to=a\namqp.property.reply_to=b", "line 2: amqp.property.reply_to is also set on line 1"},
		{"amqp.validate.json=yes", `amqp.validate.json="yes": use true or false`},
		{"amqp.content.type=application/x-protobuf\namqp.validate.json=true", "line 2: amqp.validate.json=true checks payloads sent as JSON, but amqp.content.type=application/x-protobuf is not JSON"},
		{"table.field.event.payload=", "table.field.event.payload is empty"},
		{"route.topic.regex=[[a-z]+", "line 1: route.topic.regex \"[[a-z]+\" uses a nested character class"},
	}
	for _, tt := range tests {
		if _, err := parseMapping(tt.text); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("parseMapping(%q) = %v, want an error with %q", tt.text, err, tt.want)
		}
	}
}

func TestParseMappingConnectorPrefix(t *testing.T) {
	m, err := parseMapping("transforms=outbox\ntransforms.outbox.type=io.debezium.transforms.outbox.EventRouter\n" +
		"transforms.outbox.route.by.field=topic\n# comment\ntransforms.outbox.table.op.invalid.behavior=warn\n")
	if err != nil {
		t.Fatal(err)
	}
	if m.RouteColumn != "topic" {
		t.Errorf("route.by.field %q", m.RouteColumn)
	}
}

func TestMappingColumns(t *testing.T) {
	m, err := parseMapping("table.fields.additional.placement=type:header\ntable.field.additional.missing=ignore")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range m.Columns() {
		got = append(got, c.Column+"/"+c.Option+"/"+strings.Join(c.Types, "|")+"/"+map[bool]string{true: "required", false: "optional"}[c.Required])
	}
	want := []string{"id/table.field.event.id/uuid|text|varchar|int8|int4|int2|bytea/required",
		"aggregateid/table.field.event.key/uuid|text|varchar|int8|int4|int2|bytea/required",
		"payload/table.field.event.payload/jsonb|json|text|varchar|bytea/required",
		"aggregatetype/route.by.field/uuid|text|varchar|int8|int4|int2/required",
		"type/table.field.event.type/text|varchar/optional",
		"tracingspancontext/tracing.span.context.field/text|varchar/optional",
		"type/table.fields.additional.placement//optional"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Columns\n got %q\nwant %q", got, want)
	}
}

// BenchmarkDecodeMappedInsert decodes one insert into a Debezium-shaped table with a timestamp column, a
// header placement and a tracing column, with the payload of BenchmarkDecodeInsert.
func BenchmarkDecodeMappedInsert(b *testing.B) {
	const oid = 16390
	m, err := parseMapping("table.field.event.timestamp=created_at\ntable.fields.additional.placement=type:header:eventType\n")
	if err != nil {
		b.Fatal(err)
	}
	row := with(with(with(debeziumRow(), mcol{"payload", oidJSONB,
		text(`{"order_id": "o-1", "customer": "c-42", "lines": [{"sku": "A-1", "qty": 2, "price": 12.5}], "total": 25.0}`)}),
		mcol{"created_at", oidTimestamptz, text("2024-01-02 03:04:05.123456+00")}),
		mcol{"tracingspancontext", oidText, text("traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n")})
	names, types, values := make([]string, len(row)), make([]uint32, len(row)), make([]tv, len(row))
	for i, c := range row {
		names[i], types[i], values[i] = c.name, c.oid, c.v
	}
	d := New(Config{Mapping: m})
	for _, f := range [][]byte{encBegin(0x200, 7), encRelationTypes(oid, "public", "outbox", names, types)} {
		if err := d.Decode(0, f, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	insert := encInsert(oid, values...)
	b.SetBytes(int64(len(insert)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(0x110, insert, discard{}); err != nil {
			b.Fatal(err)
		}
	}
}

// TestMappedEventCarriesItsRow: an event of a mapped table names its table and carries its row with the
// table's own column names and the values as PostgreSQL sent them (the payload shared with the body when
// the body is the value, bytea printed back in hex), for the quarantine record of an event refused later.
func TestMappedEventCarriesItsRow(t *testing.T) {
	tests := []struct {
		name, mapping string
		row           []mcol
		sharedPayload bool
	}{
		{"jsonb payload", "", debeziumRow(), true},
		{"bytea payload", "", with(debeziumRow(), mcol{"payload", oidBytea, text(`\x00ff41`)}), true},
		{"envelope", "table.fields.additional.placement=type:envelope", debeziumRow(), false},
		{"tombstone", "route.tombstone.on.empty.payload=true", with(debeziumRow(), mcol{"payload", oidJSONB, null()}), false},
		{"null column", "", append(debeziumRow(), mcol{"note", oidText, null()}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev := mappedEvent(t, tt.mapping, tt.row)
			if ev.Table != "public.outbox" {
				t.Errorf("Table %q, want public.outbox", ev.Table)
			}
			cols := ev.Mapped.Columns
			if len(cols) != len(tt.row) {
				t.Fatalf("%d columns, want %d: %+v", len(cols), len(tt.row), cols)
			}
			for i, c := range tt.row {
				got := cols[i].Raw()
				if cols[i].Name != c.name || got.Null != (c.v.kind == 'n') || string(got.Text) != c.v.s {
					t.Errorf("column %d: %s null=%v %q, want %s %q", i, cols[i].Name, got.Null, got.Text, c.name, c.v.s)
				}
				if c.name == "payload" && !got.Null && tt.sharedPayload != (&cols[i].Text[0] == &ev.Payload[0]) {
					t.Errorf("payload shared with the body: %v, want %v", !tt.sharedPayload, tt.sharedPayload)
				}
			}
		})
	}
}

// TestTopicTargetExchange: with amqp.topic.target=exchange the routed topic names the exchange, and the
// routing key comes from amqp.routing.key.source: static (amqp.routing.key, default empty), key or topic.
func TestTopicTargetExchange(t *testing.T) {
	base := "amqp.topic.target=exchange\nroute.topic.replacement=ex.${routedByValue}\n"
	tests := []struct{ mapping, exchange, key string }{
		{"route.topic.replacement=ex.${routedByValue}", "", "ex.Order"},
		{base, "ex.Order", ""},
		{base + "amqp.routing.key=orders.all", "ex.Order", "orders.all"},
		{base + "amqp.routing.key.source=key", "ex.Order", "o-1"},
		{base + "amqp.routing.key.source=topic", "ex.Order", "ex.Order"},
	}
	for _, tt := range tests {
		ev := mappedEvent(t, tt.mapping, debeziumRow())
		if ev.Mapped.Exchange != tt.exchange || ev.Mapped.RoutingKey != tt.key || ev.AggregateType != "Order" || ev.AggregateID != "o-1" {
			t.Errorf("%q: exchange %q routing key %q (lane %q/%q), want %q %q", tt.mapping, ev.Mapped.Exchange, ev.Mapped.RoutingKey,
				ev.AggregateType, ev.AggregateID, tt.exchange, tt.key)
		}
	}
	ev := mappedEvent(t, base+"amqp.routing.key.source=key", with(debeziumRow(), mcol{"aggregateid", oidText, null()}))
	if ev.Mapped.Exchange != "ex.Order" || ev.Mapped.RoutingKey != "" {
		t.Errorf("NULL key: exchange %q routing key %q, want ex.Order and an empty key", ev.Mapped.Exchange, ev.Mapped.RoutingKey)
	}
}

// TestQuarantinedByteaIDIsTheMessageID: the record of a row with a bytea id refused by the decoder carries
// the id as the message id would be (hex without \x), so that it matches FromEvent's records.
func TestQuarantinedByteaIDIsTheMessageID(t *testing.T) {
	row := with(with(debeziumRow(), mcol{"id", oidBytea, text(`\x00ff`)}), mcol{"aggregatetype", oidText, null()})
	rec, err := decodeMapped(t, "", row, "")
	if err != nil || len(rec.quarantined) != 1 {
		t.Fatalf("want one quarantined row: %v %v", err, rec.shape)
	}
	if q := rec.quarantined[0]; q.EventID != "00ff" || string(q.Columns["id"].Text) != `\x00ff` {
		t.Errorf("event id %q, column id %q; want 00ff and the column as sent", q.EventID, q.Columns["id"].Text)
	}
}
