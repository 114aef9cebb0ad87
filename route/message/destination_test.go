package message

import (
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestDestination: the exchange and routing key Publish uses, as quarantine replay prints them: native
// events go to the Router's exchange with <aggregate_type>.<event_type>; mapped ones with the mapping's
// key, to the exchange their topic names with amqp.topic.target=exchange.
func TestDestination(t *testing.T) {
	for name, tt := range map[string]struct {
		ev            cdc.Event
		exchange, key string
	}{
		"native":      {cdc.Event{AggregateType: "order", EventType: "paid"}, "events", "order.paid"},
		"mapped":      {cdc.Event{AggregateType: "Order", EventType: "Paid", Mapped: &cdc.Mapped{RoutingKey: "outbox.event.Order"}}, "events", "outbox.event.Order"},
		"by exchange": {cdc.Event{Mapped: &cdc.Mapped{RoutingKey: "o-1", ByExchange: true, Exchange: "orders"}}, "orders", "o-1"},
	} {
		exchange, key := Destination(tt.ev, "events")
		if exchange != tt.exchange || key != tt.key {
			t.Errorf("%s: Destination = %q, %q; want %q, %q", name, exchange, key, tt.exchange, tt.key)
		}
	}
}
