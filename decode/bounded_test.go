package decode

import (
	"bytes"
	"crypto/sha256"
	"runtime"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// lastQuarantine is a Handler that keeps the last Quarantine.
type lastQuarantine struct {
	discard
	q cdc.Quarantined
}

func (h *lastQuarantine) Quarantine(q cdc.Quarantined) error { h.q = q; return nil }

// openDecoder returns a Decoder in an open transaction that knows the outbox as relation 16385.
func openDecoder(tb testing.TB, cfg Config) *Decoder {
	tb.Helper()
	d := New(cfg)
	for _, f := range [][]byte{encBegin(0x200, 7), encRelation(16385, "public", "outbox", outboxColumns()...)} {
		if err := d.Decode(0, f, discard{}); err != nil {
			tb.Fatal(err)
		}
	}
	return d
}

// oversizedInsert is an outbox insert whose payload is n bytes of 'x', not even JSON: only its length
// may be looked at.
func oversizedInsert(n int) (insert, payload []byte) {
	payload = bytes.Repeat([]byte("x"), n)
	return encInsert(16385, withColumn(outboxRow(id1, "1"), colPayload, text(string(payload)))...), payload
}

// TestOversizedValuesAreNotCopied decodes a 64 MiB payload: it is quarantined from its length on the wire,
// keeping a 64 KiB prefix, its size and its digest, and Decode allocates little more than that prefix.
func TestOversizedValuesAreNotCopied(t *testing.T) {
	insert, payload := oversizedInsert(64 << 20)
	d, h := openDecoder(t, Config{}), &lastQuarantine{}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := d.Decode(0x110, insert, h); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	allocs := testing.AllocsPerRun(3, func() {
		if err := d.Decode(0x110, insert, discard{}); err != nil {
			t.Fatal(err)
		}
	})
	t.Logf("a %d-byte payload: Decode allocated %d bytes in %.0f allocations", len(payload), allocated, allocs)
	if limit := uint64(cdc.MaxStoredValue + 32<<10); allocated > limit {
		t.Errorf("Decode allocated %d bytes for a quarantined 64 MiB payload, want at most %d", allocated, limit)
	}
	if allocs > 40 {
		t.Errorf("%.0f allocations per Decode, want at most 40", allocs)
	}
	q := h.q
	if want := "payload is 67108864 bytes, over the 8388608-byte limit (--max-payload-bytes)"; q.Reason != want {
		t.Errorf("reason %q, want %q", q.Reason, want)
	}
	p := q.Columns["payload"]
	if p.Size != int64(len(payload)) || len(p.Text) != cdc.MaxStoredValue || !p.Truncated() || p.SHA256 != sha256.Sum256(payload) {
		t.Errorf("payload kept as %d bytes of %d, truncated %v, digest ok %v", len(p.Text), p.Size, p.Truncated(), p.SHA256 == sha256.Sum256(payload))
	}
	if q.EventID != id1 || q.LSN != 0x110 || q.Table != "public.outbox" {
		t.Errorf("quarantined %s at %s in %s", q.EventID, q.LSN, q.Table)
	}
}

func TestOversizedOtherColumn(t *testing.T) {
	big := strings.Repeat("a", DefaultMaxPayloadBytes+1)
	d, h := openDecoder(t, Config{MaxPayloadBytes: 1024}), &lastQuarantine{}
	insert := encInsert(16385, withColumn(outboxRow(id1, "1"), colAggregateID, text(big))...)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := d.Decode(0x110, insert, h); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if want := "aggregate_id is 8388609 bytes, over the 8388608-byte limit of a column other than the payload"; h.q.Reason != want {
		t.Errorf("reason %q, want %q", h.q.Reason, want)
	}
	if allocated := after.TotalAlloc - before.TotalAlloc; allocated > cdc.MaxStoredValue+32<<10 {
		t.Errorf("Decode allocated %d bytes", allocated)
	}
}

func TestQuarantinedEventIDIsBounded(t *testing.T) {
	for _, tt := range []struct{ id, want string }{
		{id: strings.Repeat("é", 200), want: strings.Repeat("é", 127)}, // 400 bytes: cut at 254, not inside a rune
		{id: strings.Repeat("x", 300), want: strings.Repeat("x", 255)},
		{id: "\xff\xfe not UTF-8", want: "\xff\xfe not UTF-8"}, // kept as sent; the quarantine store copes
	} {
		d, h := openDecoder(t, Config{}), &lastQuarantine{}
		if err := d.Decode(0x110, encInsert(16385, withColumn(outboxRow(id1, "1"), colID, text(tt.id))...), h); err != nil {
			t.Fatal(err)
		}
		if h.q.EventID != tt.want || len(tt.want) > maxEventID || utf8.ValidString(tt.id) && !utf8.ValidString(h.q.EventID) {
			t.Errorf("event id %q, want %q", h.q.EventID, tt.want)
		}
	}
}

// BenchmarkDecodeOversizedPayload decodes an insert with a 64 MiB payload over the limit: B/op must stay
// near cdc.MaxStoredValue, whatever the payload's size.
func BenchmarkDecodeOversizedPayload(b *testing.B) {
	insert, _ := oversizedInsert(64 << 20)
	d := openDecoder(b, Config{})
	b.SetBytes(int64(len(insert)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(0x110, insert, discard{}); err != nil {
			b.Fatal(err)
		}
	}
}
