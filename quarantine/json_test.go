package quarantine

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// bigEscape matches a \u escape that jsonb refuses in some server encoding: \u0000, or any above U+007F.
var bigEscape = regexp.MustCompile(`\\u(0000|00[89a-fA-F][0-9a-fA-F]|0[1-9a-fA-F][0-9a-fA-F]{2}|[1-9a-fA-F][0-9a-fA-F]{3})`)

func TestAppendString(t *testing.T) {
	cases := []struct {
		in, want string
		replaced bool
	}{
		{"plain", `"plain"`, false},
		{"q\"b\\s/", `"q\"b\\s/"`, false},
		{"line\u2028para\u2029", "\"line\u2028para\u2029\"", false},
		{"tab\tnl\ncr\r\x01\x1f\x7f", "\"tab\\tnl\\ncr\\r\\u0001\\u001f\x7f\"", false},
		{"bad\xff\xc3(", "\"bad\uFFFD\uFFFD(\"", true},
		{"nul\x00", "\"nul\uFFFD\"", true},
		{"surrogate\xed\xa0\x80", "\"surrogate\uFFFD\uFFFD\uFFFD\"", true},
		{"é日本🙂", `"é日本🙂"`, false},
	}
	for _, tc := range cases {
		got, replaced := appendString(nil, []byte(tc.in))
		if string(got) != tc.want || replaced != tc.replaced {
			t.Errorf("appendString(%q) = %s, %v; want %s, %v", tc.in, got, replaced, tc.want, tc.replaced)
		}
	}
}

// FuzzAppendString: for any bytes the result is valid UTF-8 and valid JSON without an escape that jsonb
// refuses in some encoding, and it decodes to the input with invalid bytes and NUL replaced.
func FuzzAppendString(f *testing.F) {
	for _, s := range []string{"", "a\"b", "\xff\xfe", "\u2028", "\x00", "\x1b[0m", "é\xc3"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, _ := appendString(nil, in)
		if !utf8.Valid(out) || !json.Valid(out) || bigEscape.Match(out) {
			t.Fatalf("appendString(%q) = %q", in, out)
		}
		var back string
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatal(err)
		}
		want := strings.ReplaceAll(string(in), "\x00", "\uFFFD")
		if !utf8.ValidString(want) {
			want = strings.Map(func(r rune) rune { return r }, want) // one U+FFFD per invalid byte, as ranging does
		}
		if back != want {
			t.Fatalf("round trip of %q = %q, want %q", in, back, want)
		}
	})
}

func TestCutPrefixNeverSplitsACharacter(t *testing.T) {
	whole := []byte(`{"k":"x` + strings.Repeat("é", cdc.MaxStoredValue) + `"}`)
	text, truncated := cutPrefix(cdc.NewRawValue(whole))
	if !truncated || len(text) != cdc.MaxStoredValue-1 || !utf8.Valid(text) {
		t.Fatalf("cut to %d bytes (truncated %v, valid %v), want %d valid bytes", len(text), truncated, utf8.Valid(text),
			cdc.MaxStoredValue-1)
	}
	if text, truncated := cutPrefix(cdc.TextValue("short é")); truncated || string(text) != "short é" {
		t.Fatalf("a whole value was cut: %q %v", text, truncated)
	}
}

func TestEncodeValues(t *testing.T) {
	values, notes := encodeValues(map[string]cdc.RawValue{"b": cdc.TextValue("x"), "a": cdc.NullValue()})
	if values != `{"a":null,"b":"x"}` || notes != nil {
		t.Fatalf("values %s, notes %v", values, notes)
	}
	values, notes = encodeValues(map[string]cdc.RawValue{"p": cdc.TextValue("\xff")})
	if values != "{\"p\":\"\uFFFD\"}" || notes == nil ||
		*notes != `{"p":{"bytes":1,"sha256":"a8100ae6aa1940d0b663bb31cd466142ebbdbd5187131b92d93818987832eb89","truncated":false,"invalid_utf8":true}}` {
		t.Fatalf("values %s, notes %v", values, *notes)
	}
}

func TestKey(t *testing.T) {
	cases := []struct {
		typ, id string
		version int64
		want    string
	}{
		{"a/b", "c", 1, `["a/b","c",1]`},
		{"a", "b/c", 1, `["a","b/c",1]`},
		{`q"`, "\u2028", -3, "[\"q\\\"\",\"\u2028\",-3]"},
		{"\xff", "", 0, `[{"hex":"ff"},"",0]`},
		{"日本🙂", "é", 2, `["日本🙂","é",2]`},
	}
	for _, tc := range cases {
		got := Key(tc.typ, tc.id, tc.version)
		if got != tc.want || !json.Valid([]byte(got)) {
			t.Errorf("Key(%q, %q, %d) = %s, want %s", tc.typ, tc.id, tc.version, got, tc.want)
		}
		var a, b any // the ASCII form of a minimal record is the same JSON value
		if err := json.Unmarshal([]byte(asciiJSON(got)), &a); err != nil || json.Unmarshal([]byte(got), &b) != nil ||
			fmt.Sprint(a) != fmt.Sprint(b) {
			t.Errorf("asciiJSON(%s) = %s (%v), not the same value", got, asciiJSON(got), err)
		}
	}
}

func TestFromEvent(t *testing.T) {
	ev := cdc.Event{ID: "0b4e7d3c-1111-4222-8333-944445555666", AggregateType: "order", AggregateID: "a/1",
		AggregateVersion: 7, EventType: "created", SchemaVersion: 2, Payload: []byte(`{"n":1}`),
		Headers: []byte(`{"CC":"x"}`), OccurredAt: time.Date(2026, 3, 4, 5, 6, 7, 120000000, time.FixedZone("", 3600)),
		CommitLSN: 0x2000, LSN: 0x1F00, Ordinal: 2}
	q := FromEvent(ev, "public.outbox", "reserved header CC")
	want := map[string]string{"id": ev.ID, "aggregate_type": "order", "aggregate_id": "a/1", "aggregate_version": "7",
		"event_type": "created", "schema_version": "2", "payload": `{"n":1}`, "headers": `{"CC":"x"}`,
		"occurred_at": "2026-03-04 04:06:07.12+00"}
	for name, v := range want {
		if got := string(q.Columns[name].Text); got != v {
			t.Errorf("column %s = %q, want %q", name, got, v)
		}
	}
	if q.LSN != 0x1F00 || q.Ordinal != 2 || q.RowKey != "" || q.CommitLSN != 0x2000 || q.EventID != ev.ID ||
		q.Table != "public.outbox" || q.Reason != "reserved header CC" {
		t.Fatalf("streamed record %+v", q)
	}
	ev.Backfill, ev.LSN, ev.Ordinal, ev.Headers = true, 0, 0, nil
	ev.OccurredAt = time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	q = FromEvent(ev, "public.outbox", "r")
	if q.LSN != 0x2000 || q.RowKey != `["order","a/1",7]` || !q.Columns["headers"].Null ||
		string(q.Columns["occurred_at"].Text) != "2026-03-04 05:06:07+00" {
		t.Fatalf("backfill record %+v", q)
	}
}

// TestFromMappedEvent: the record of a refused event of a mapped table names the table the row came from
// (not the --table given first) and holds the table's own columns, bytea printed as PostgreSQL prints it.
func TestFromMappedEvent(t *testing.T) {
	payload := []byte{0, 0xff, 'A'}
	ev := cdc.Event{ID: "e-1", AggregateType: "Order", AggregateID: "o-1", Payload: payload, CommitLSN: 0x2000,
		LSN: 0x1F00, Ordinal: 1, Table: "sales.dbz_outbox", Mapped: &cdc.Mapped{RoutingKey: "outbox.event.Order",
			Columns: []cdc.Column{{Name: "id", Text: []byte("e-1")}, {Name: "aggregatetype", Text: []byte("Order")},
				{Name: "aggregateid", Text: []byte("o-1")}, {Name: "payload", Bytea: true, Text: payload},
				{Name: "tracingspancontext", Null: true}}}}
	q := FromEvent(ev, "public.outbox", "routing key too long")
	if q.Table != "sales.dbz_outbox" || q.EventID != "e-1" || q.LSN != 0x1F00 || q.Ordinal != 1 {
		t.Errorf("record %+v", q)
	}
	want := map[string]string{"id": "e-1", "aggregatetype": "Order", "aggregateid": "o-1", "payload": `\x00ff41`}
	if len(q.Columns) != 5 || !q.Columns["tracingspancontext"].Null {
		t.Errorf("columns %v, want the table's five", q.Columns)
	}
	for name, v := range want {
		if got := string(q.Columns[name].Text); got != v || q.Columns[name].Size != int64(len(v)) {
			t.Errorf("column %s = %q, want %q", name, got, v)
		}
	}
}
