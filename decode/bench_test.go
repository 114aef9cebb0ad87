package decode

import (
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// discard is a Handler that keeps nothing.
type discard struct{}

func (discard) Begin(cdc.LSN) error              { return nil }
func (discard) Event(cdc.Event) error            { return nil }
func (discard) Quarantine(cdc.Quarantined) error { return nil }
func (discard) Commit(cdc.LSN, cdc.LSN) error    { return nil }

// BenchmarkDecodeInsert decodes one outbox Insert inside an open transaction: the per-event hot path.
func BenchmarkDecodeInsert(b *testing.B) {
	const oid = 16385
	d := New(Config{})
	for _, f := range [][]byte{encBegin(0x200, 7), encRelation(oid, "public", "outbox", outboxColumns()...)} {
		if err := d.Decode(0, f, discard{}); err != nil {
			b.Fatal(err)
		}
	}
	row := withColumn(outboxRow(id1, "12345"), 6,
		text(`{"order_id": "o-1", "customer": "c-42", "lines": [{"sku": "A-1", "qty": 2, "price": 12.5}], "total": 25.0}`))
	insert := encInsert(oid, row...)
	b.SetBytes(int64(len(insert)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(0x110, insert, discard{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeMessage decodes one emitted event (a transactional Message with the router's prefix and
// the payload of BenchmarkDecodeInsert) inside an open transaction.
func BenchmarkDecodeMessage(b *testing.B) {
	d := New(Config{MessagePrefix: "cdc-router.outbox", EmitKeys: testEmitKeys})
	if err := d.Decode(0, encBegin(0x200, testXID), discard{}); err != nil {
		b.Fatal(err)
	}
	content := `{"id": "` + id1 + `", "aggregate_type": "order", "aggregate_id": "o-1", "aggregate_version": 12345,
		"event_type": "created", "schema_version": 1, "headers": {"traceparent": "00-x"}, "occurred_at": "2026-12-01T10:00:00.123456+00:00",
		"payload": {"order_id": "o-1", "customer": "c-42", "lines": [{"sku": "A-1", "qty": 2, "price": 12.5}], "total": 25.0}}`
	msg := encMessage(true, 0x110, "cdc-router.outbox", signed(content))
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if err := d.Decode(0x110, msg, discard{}); err != nil {
			b.Fatal(err)
		}
	}
}
