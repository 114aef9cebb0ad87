package decode

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// rowMapped maps row with a RowMapper, as the snapshot reads it: the columns' names and types, the values
// as text (nil for NULL), and the commit time the stream's encBegin writes standing in for the read time.
func rowMapped(t *testing.T, mapping string, row []mcol) (cdc.Event, bool, error) {
	t.Helper()
	m, err := parseMapping(mapping)
	if err != nil {
		t.Fatalf("ParseMapping: %v", err)
	}
	cols, values := make([]Column, len(row)), make([]*string, len(row))
	for i, c := range row {
		cols[i] = Column{Name: c.name, TypeOID: c.oid}
		if c.v.kind == 't' {
			s := c.v.s
			values[i] = &s
		}
	}
	rm, err := NewRowMapper(Config{Mapping: m}, "public.outbox", cols)
	if err != nil {
		return cdc.Event{}, false, err
	}
	return rm.Map(values, commitTime)
}

// streamCases are rows of every column type a mapping accepts, in every placement, for the comparison
// of the stream and the row mapping.
func streamCases() []struct {
	name, mapping string
	row           []mcol
} {
	row := debeziumRow()
	trace := text("#Thu Jan 01 00:00:00 UTC 2024\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\ntracestate=congo\\=t61rcWkgMzE\n")
	return []struct {
		name, mapping string
		row           []mcol
	}{
		{"defaults: uuid id, jsonb payload, commit time", "", row},
		{"json payload", "", with(row, mcol{"payload", oidJSON, text(`{"a": [1, 2]}`)})},
		{"text payload", "", with(row, mcol{"payload", oidText, text("hello")})},
		{"varchar payload", "", with(row, mcol{"payload", oidVarchar, text("hello")})},
		{"bytea payload", "", with(row, mcol{"payload", oidBytea, text(`\x00ff41`)})},
		{"text id", "", with(row, mcol{"id", oidText, text("evt-1")})},
		{"int8 id", "", with(row, mcol{"id", oidInt8, text("9007199254740993")})},
		{"int4 id and int2 key", "", with(with(row, mcol{"id", oidInt4, text("42")}), mcol{"aggregateid", oidInt2, text("7")})},
		{"uuid key", "", with(row, mcol{"aggregateid", oidUUID, text(id1)})},
		{"NULL key", "", with(row, mcol{"aggregateid", oidText, null()})},
		{"timestamptz", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidTimestamptz, text("2025-03-04 05:06:07.891+00")})},
		{"timestamp", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidTimestamp, text("2025-03-04 05:06:07.891234")})},
		{"int8 epoch ms", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidInt8, text("1700000000123")})},
		{"int8 epoch us", "table.field.event.timestamp=ts\namqp.timestamp.unit=us", with(row, mcol{"ts", oidInt8, text("1700000000123456")})},
		{"NULL timestamp", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidTimestamptz, null()})},
		{"schema version", "table.field.event.schema.version=v", with(row, mcol{"v", oidInt4, text("3")})},
		{"tracing column", "", with(row, mcol{"tracingspancontext", oidText, trace})},
		{"header placements of every type", "table.fields.additional.placement=type:header:eventType,flag:header,n:header,f:header,at:header,raw:header,nothing:header",
			with(with(with(with(with(with(row, mcol{"flag", oidBool, text("t")}), mcol{"n", oidInt8, text("-5")}), mcol{"f", oidFloat8, text("0.1")}),
				mcol{"at", oidTimestamptz, text("2025-03-04 05:06:07+00")}), mcol{"raw", oidBytea, text(`\xdead`)}), mcol{"nothing", oidText, null()})},
		{"envelope placements", "table.fields.additional.placement=type:envelope:eventType,aggregateid:envelope,n:envelope",
			with(row, mcol{"n", oidInt4, null()})},
		{"envelope with table.expand.json.payload", "table.fields.additional.placement=type:envelope\ntable.expand.json.payload=true", row},
		{"envelope with bytea payload", "table.fields.additional.placement=type:envelope", with(row, mcol{"payload", oidBytea, text(`\x4869`)})},
		{"route.by.field with regex", "route.by.field=topic\nroute.topic.regex=orders\\\\.(?<what>.*)\nroute.topic.replacement=svc.${what}",
			with(row, mcol{"topic", oidText, text("orders.created")})},
		{"tombstone as empty body", "route.tombstone.on.empty.payload=true", with(row, mcol{"payload", oidJSONB, null()})},
		{"amqp.content.type and key header", "amqp.content.type=application/vnd.acme+json\namqp.key.header=customer", row},
	}
}

// A row read with SELECT and the same row streamed become the same event, apart from the positions the
// caller sets (CommitLSN, LSN, Ordinal) and the commit time the stream knows (CommitTime).
func TestRowMapperMatchesStream(t *testing.T) {
	for _, tt := range streamCases() {
		t.Run(tt.name, func(t *testing.T) {
			streamed := mappedEvent(t, tt.mapping, tt.row)
			read, drop, err := rowMapped(t, tt.mapping, tt.row)
			if err != nil || drop {
				t.Fatalf("Map: drop %v, %v", drop, err)
			}
			if streamed.CommitLSN == 0 || read.CommitLSN != 0 {
				t.Fatalf("commit LSN streamed %s, read %s: want the stream's set and the read one left to the caller", streamed.CommitLSN, read.CommitLSN)
			}
			streamed.CommitLSN, streamed.LSN, streamed.Ordinal, streamed.CommitTime = 0, 0, 0, time.Time{}
			if !reflect.DeepEqual(read, streamed) {
				t.Errorf("read     %+v %+v\nstreamed %+v %+v", read, read.Mapped, streamed, streamed.Mapped)
			}
		})
	}
}

// A row the stream quarantines, the row mapping refuses with the same reason; a dropped tombstone is
// dropped by both.
func TestRowMapperRefusesLikeStream(t *testing.T) {
	row := debeziumRow()
	tests := []struct {
		name, mapping string
		row           []mcol
	}{
		{"NULL routing value", "", with(row, mcol{"aggregatetype", oidVarchar, null()})},
		{"NULL payload without tombstones", "", with(row, mcol{"payload", oidJSONB, null()})},
		{"NULL id", "", with(row, mcol{"id", oidUUID, null()})},
		{"bad epoch", "table.field.event.timestamp=ts", with(row, mcol{"ts", oidInt8, text("x")})},
		{"bytea not in hex", "", with(row, mcol{"payload", oidBytea, text(`abc`)})},
		{"oversized key", "", with(row, mcol{"aggregateid", oidText, text(strings.Repeat("k", DefaultMaxPayloadBytes+1))})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := decodeMapped(t, tt.mapping, tt.row, "")
			if err != nil || len(rec.quarantined) != 1 {
				t.Fatalf("stream: %v %v", err, rec.shape)
			}
			_, _, err = rowMapped(t, tt.mapping, tt.row)
			var rowErr *RowError
			if !errors.As(err, &rowErr) || rowErr.Reason != rec.quarantined[0].Reason {
				t.Fatalf("Map: %v, want a RowError %q", err, rec.quarantined[0].Reason)
			}
		})
	}
	_, drop, err := rowMapped(t, "route.tombstone.on.empty.payload=true\namqp.tombstone=drop", with(row, mcol{"payload", oidJSONB, null()}))
	if err != nil || !drop {
		t.Errorf("tombstone with amqp.tombstone=drop: drop %v, %v", drop, err)
	}
}

// A table that does not fit the mapping is refused with the problem the stream finds in its Relation message.
func TestRowMapperRefusesTable(t *testing.T) {
	row := debeziumRow()
	tests := []struct {
		name, mapping string
		row           []mcol
	}{
		{"missing payload", "table.field.event.payload=body", row},
		{"payload of another type", "", with(row, mcol{"payload", oidInt4, text("1")})},
		{"missing route column", "route.by.field=topic", row},
		{"missing timestamp column", "table.field.event.timestamp=ts", row},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, streamErr := decodeMapped(t, tt.mapping, tt.row, "")
			var drift *DriftError
			if !errors.As(streamErr, &drift) {
				t.Fatalf("stream: %v", streamErr)
			}
			_, _, err := rowMapped(t, tt.mapping, tt.row)
			var mErr *MappingError
			if !errors.As(err, &mErr) || mErr.Problem != drift.Problem || mErr.Table != "public.outbox" ||
				!strings.Contains(err.Error(), "--config file") {
				t.Fatalf("NewRowMapper: %v, want a MappingError %q naming the --config file", err, drift.Problem)
			}
		})
	}
	if _, err := NewRowMapper(Config{}, "public.outbox", nil); err == nil || !strings.Contains(err.Error(), "has no mapping") {
		t.Errorf("a native table: %v", err)
	}
}

func TestMappingFor(t *testing.T) {
	a, b := &Mapping{Table: "public.a"}, &Mapping{Table: "s.b"}
	cfg := Config{Table: "a", Mapping: a, MoreTables: []Outbox{{Table: "s.b", Mapping: b}, {Table: "public.c"}}}
	for table, want := range map[string]*Mapping{"a": a, "public.a": a, "s.b": b, "c": nil, "d": nil} {
		if got := MappingFor(cfg, table); got != want {
			t.Errorf("MappingFor(%q) = %v, want %v", table, got, want)
		}
	}
}
