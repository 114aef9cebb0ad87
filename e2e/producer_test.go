package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/outbox"
)

// TestProducerHelperEventsArriveWithTraceHeaders writes events with package outbox (pgx, the trace context
// set) and checks what a consumer receives: the versions the helper assigned, in order, and the W3C trace
// context as the AMQP headers traceparent and tracestate.
func TestProducerHelperEventsArriveWithTraceHeaders(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.startStreaming()
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	ctx := outbox.WithTraceParent(context.Background(), tp, "congo=t61rcWkgMzE")
	var rows []row
	for i := range 3 {
		err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
			got, err := outbox.Writer{}.Write(ctx, tx, outbox.Event{AggregateType: "order", AggregateID: "42", Type: "paid",
				Payload: fmt.Appendf(nil, `{"n": %d}`, i), Headers: map[string]any{"tenant": "acme"}})
			rows = append(rows, row{id: got.ID})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	got := c.waitFor(t, rows, 30*time.Second)
	for i, d := range got {
		h := d.msg.Headers
		if d.id != rows[i].id || d.version != int64(i+1) || d.routingKey != "order.paid" ||
			h["traceparent"] != tp || h["tracestate"] != "congo=t61rcWkgMzE" || h["tenant"] != "acme" {
			t.Errorf("delivery %d: id %s version %d key %s headers %v; want id %s version %d", i, d.id, d.version,
				d.routingKey, h, rows[i].id, i+1)
		}
	}
}
