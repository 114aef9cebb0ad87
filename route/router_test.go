package route

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/route/message"
)

// TestPublishAllInOrder: 5,000 events of 50 aggregates through 4 lanes: every done once, every message
// delivered with the mapped properties and headers, and the deliveries of each aggregate in order.
func TestPublishAllInOrder(t *testing.T) {
	const aggregates, perAggregate = 50, 100
	b := newBroker(t)
	r := b.dial(b.config(""))
	q := b.queue("#", nil)
	c := newCounter()
	want := map[string]cdc.Event{}
	ctx := context.Background()
	for i := range perAggregate {
		for a := range aggregates {
			ev := event("order", fmt.Sprint(a), i)
			if a%7 == 0 {
				ev.Backfill = true
			}
			want[ev.ID] = ev
			if err := r.Publish(ctx, ev, c.done(ev.ID)); err != nil {
				t.Fatalf("Publish: %v", err)
			}
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := r.Drain(dctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	for id := range want {
		if n := c.count(id); n != 1 {
			t.Fatalf("done called %d times for %s", n, id)
		}
	}
	last := map[string]int64{}
	for _, d := range b.consume(q, len(want), 30*time.Second) {
		ev, ok := want[d.MessageId]
		if !ok {
			t.Fatalf("unexpected message %q", d.MessageId)
		}
		checkDelivery(t, ev, d)
		agg := d.Headers[message.HeaderAggregateID].(string)
		if v, seen := last[agg]; seen && ev.AggregateVersion <= v {
			t.Fatalf("aggregate %s: version %d delivered after %d", agg, ev.AggregateVersion, v)
		}
		last[agg] = ev.AggregateVersion
		delete(want, d.MessageId)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// checkDelivery compares what the consumer got with what the mapping says, header by header.
func checkDelivery(t *testing.T, ev cdc.Event, d amqp.Delivery) {
	t.Helper()
	key, m := message.Unchecked(ev)
	got := []any{d.RoutingKey, d.ContentType, d.DeliveryMode, d.MessageId, d.Type, d.Timestamp.Unix(), string(d.Body)}
	exp := []any{key, m.ContentType, m.DeliveryMode, m.MessageId, m.Type, m.Timestamp.Unix(), string(m.Body)}
	if !reflect.DeepEqual(got, exp) || !reflect.DeepEqual(d.Headers, m.Headers) {
		t.Fatalf("delivery of %s:\n got %v %#v\nwant %v %#v", ev.ID, got, d.Headers, exp, m.Headers)
	}
}

// TestDrain: Drain returns once every published event is resolved, and done has been called for each.
func TestDrain(t *testing.T) {
	b := newBroker(t)
	r := b.dial(b.config(""))
	b.queue("#", nil)
	c := newCounter()
	for i := range 200 {
		ev := event("drain", fmt.Sprint(i%5), i)
		if err := r.Publish(context.Background(), ev, c.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if n := c.t.Load(); n != 200 {
		t.Fatalf("done called %d times after Drain, want 200", n)
	}
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain when idle: %v", err)
	}
}

// TestWindowPipelines shows that a lane keeps many messages in flight: Window 512 against Window 1 on
// one lane, to a durable queue, over 512 aggregates (one aggregate has at most one event in flight).
func TestWindowPipelines(t *testing.T) {
	rate := func(window, n int) float64 {
		b := newBroker(t)
		cfg := b.config("")
		cfg.Lanes, cfg.Window = 1, window
		r := b.dial(cfg)
		q, err := b.admin.QueueDeclare(b.exchange+".q", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.admin.QueueDelete(q.Name, false, false, false) })
		if err := b.admin.QueueBind(q.Name, "#", b.exchange, false, nil); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := range n {
			if err := r.Publish(context.Background(), event("bench", fmt.Sprint(i%512), i), nil); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		return float64(n) / time.Since(start).Seconds()
	}
	one := rate(1, 200)
	many := rate(512, 3000)
	t.Logf("throughput, 1 lane, durable queue: Window=1 %.0f events/s, Window=512 %.0f events/s (%.1fx)", one, many, many/one)
	if many < 2*one {
		t.Errorf("Window=512 (%.0f/s) is not clearly faster than Window=1 (%.0f/s): the lane does not pipeline", many, one)
	}
}

// TestPublishRefusesInvalidEvent: an event that fails Check is refused without failing the Router.
func TestPublishRefusesInvalidEvent(t *testing.T) {
	b := newBroker(t)
	r := b.dial(b.config(""))
	ev := event("x", "1", 1)
	ev.Headers = []byte(`[1,2]`)
	if err := r.Publish(context.Background(), ev, nil); err == nil || r.Err() != nil {
		t.Fatalf("Publish = %v, Err = %v; want ErrInvalidEvent and a working router", err, r.Err())
	}
}
