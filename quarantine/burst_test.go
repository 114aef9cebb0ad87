package quarantine

import (
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestBurstKind: the records aggregated are those of messages anyone can emit, by their reason: every
// non-transactional message, and an emitted message that fails authentication (whether the decoder prefixes
// the reason with "message: " or not); a malformed envelope, a row and a refused event are recorded one by one.
func TestBurstKind(t *testing.T) {
	msg := decode.MessageTable + "cdc-router.outbox"
	for _, tc := range []struct {
		table, reason string
		aggregated    bool
	}{
		{msg, decode.NonTransactionalReason, true},
		{msg, decode.NonTransactionalReason + "; the message is 99 bytes, over the limit", true},
		{msg, "message: unauthenticated emitted message: no MAC", true},
		{msg, "unauthenticated emitted message: the MAC does not match", true},
		{msg, "message: the content is not a JSON object: x", false},
		{"public.outbox", decode.NonTransactionalReason, false},
		{"public.outbox", "aggregate_id is NULL", false},
	} {
		if got := BurstKind(cdc.Quarantined{Table: tc.table, Reason: tc.reason}) != ""; got != tc.aggregated {
			t.Errorf("%s: %q: aggregated %v, want %v", tc.table, tc.reason, got, tc.aggregated)
		}
	}
}

// TestBurstsAggregateOneRecordPerKind: the messages of one kind make one record, the first's, whose reason
// counts them, names the last LSN and their bytes; another kind has its own; a burst is due only once its
// window has passed (or when all are asked for), and stays open until it is written.
func TestBurstsAggregateOneRecordPerKind(t *testing.T) {
	msg := decode.MessageTable + "cdc-router.outbox"
	var b Bursts[int]
	for i, lsn := range []cdc.LSN{10, 20, 30} {
		b.Add(cdc.Quarantined{Table: msg, LSN: lsn, Reason: decode.NonTransactionalReason,
			Columns: map[string]cdc.RawValue{"content": {Size: 100}}}, "non-transactional", i)
	}
	b.Add(cdc.Quarantined{Table: msg, LSN: 25, Reason: "unauthenticated emitted message: no MAC"}, "unauthenticated", 9)
	if b.Open() != 2 {
		t.Fatalf("%d open bursts, want 2", b.Open())
	}
	if _, ok := b.Next(false); ok {
		t.Fatal("a burst was due before its window passed")
	}
	o, ok := b.Next(true)
	if !ok || o.Count != 3 || o.Last != 30 || o.Record.LSN != 10 || len(o.Holds) != 3 ||
		!strings.Contains(o.Record.Reason, "one record for 3 such messages") ||
		!strings.Contains(o.Record.Reason, "up to LSN "+cdc.LSN(30).String()+", 300 bytes") {
		t.Fatalf("first burst %+v, %v", o, ok)
	}
	if again, _ := b.Next(true); again.Count != 3 {
		t.Fatal("a burst not written was not returned again")
	}
	b.Written()
	o, ok = b.Next(true)
	if !ok || o.Count != 1 || o.Record.Reason != "unauthenticated emitted message: no MAC" || o.Holds[0] != 9 {
		t.Fatalf("second burst %+v, %v: want the message's own record", o, ok)
	}
	b.Written()
	if b.Open() != 0 {
		t.Fatal("bursts left open")
	}
}

// TestBurstsKeepEachUnauthenticatedMessage: messages failing authentication, from two transactions, make one
// record that holds each one's content (the first as content, the next as content <LSN>, with its ordinal
// when it is not the first at its position) and says so; a burst holding KeptPerRecord of them is due at
// once, and the next such message opens another.
func TestBurstsKeepEachUnauthenticatedMessage(t *testing.T) {
	msg := decode.MessageTable + "cdc-router.outbox"
	const reason = "unauthenticated emitted message: its MAC (key 1) does not match"
	var b Bursts[int]
	kind := BurstKind(cdc.Quarantined{Table: msg, Reason: reason})
	for i, m := range []struct {
		lsn     cdc.LSN
		ordinal int
		content string
	}{{10, 0, "first"}, {20, 0, "second"}, {20, 1, "third"}} {
		b.Add(cdc.Quarantined{Table: msg, LSN: m.lsn, Ordinal: m.ordinal, Reason: reason,
			Columns: map[string]cdc.RawValue{decode.MessageColumn: cdc.NewRawValue([]byte(m.content))}}, kind, i)
	}
	o, ok := b.Next(true)
	if !ok || o.Count != 3 || !strings.Contains(o.Record.Reason, "each is stored") {
		t.Fatalf("burst %+v, %v", o, ok)
	}
	for name, want := range map[string]string{"content": "first", "content " + cdc.LSN(20).String(): "second",
		"content " + cdc.LSN(20).String() + "#1": "third"} {
		if got := o.Record.Columns[name]; string(got.Text) != want {
			t.Errorf("column %q holds %q, want %q", name, got.Text, want)
		}
	}
	b.Written()

	for i := range KeptPerRecord + 1 {
		b.Add(cdc.Quarantined{Table: msg, LSN: cdc.LSN(100 + i), Reason: reason,
			Columns: map[string]cdc.RawValue{decode.MessageColumn: cdc.NewRawValue([]byte("x"))}}, kind, i)
	}
	o, ok = b.Next(false)
	if !ok || o.Count != KeptPerRecord || len(o.Record.Columns) != KeptPerRecord {
		t.Fatalf("a full burst: %v, %d messages, %d columns; want due at once with %d", ok, o.Count, len(o.Record.Columns), KeptPerRecord)
	}
	b.Written()
	if o, ok = b.Next(true); !ok || o.Count != 1 || o.Record.LSN != cdc.LSN(100+KeptPerRecord) {
		t.Fatalf("the message after a full burst: %+v %v", o, ok)
	}
}
