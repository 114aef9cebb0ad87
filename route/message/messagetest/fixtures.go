// Package messagetest holds the events the tests of route and route/message share.
package messagetest

import (
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// MappedEvent is a mapped event (a --config table's row) with typed headers, a repeated header name and
// a byte-array value.
func MappedEvent() cdc.Event {
	ts := time.Date(2025, 3, 4, 5, 6, 7, 891e6, time.UTC)
	return cdc.Event{ID: "42", AggregateType: "Order", AggregateID: "o-1", EventType: "OrderCreated", Payload: []byte(`{"a":1}`),
		OccurredAt: ts, CommitLSN: 0x1_0000_0010, Mapped: &cdc.Mapped{RoutingKey: "outbox.event.Order", ContentType: "application/json",
			Timestamp: ts, Headers: []cdc.Header{{Name: "id", Value: int64(42)}, {Name: "key", Value: "o-1"},
				{Name: "timestamp_in_ms", Value: ts.UnixMilli()}, {Name: "id", Value: "placed"}, {Name: "raw", Value: []byte{0, 1}}}}}
}

// NativeEvent is an event of the native outbox shape with every column set.
func NativeEvent() cdc.Event {
	return cdc.Event{
		ID:               "0190f3c2-7a1e-7c3b-9a51-2f1f4d3b8e01",
		AggregateType:    "order",
		AggregateID:      "42",
		AggregateVersion: 7,
		EventType:        "created",
		SchemaVersion:    2,
		Payload:          []byte(`{"total": 12.5, "items": [1, 2]}`),
		OccurredAt:       time.Date(2026, 3, 14, 15, 9, 26, 0, time.UTC),
		CommitLSN:        0x16_B374D848,
	}
}
