package route

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/route/message"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// heldEvents is the number of events held in r's lanes now.
func heldEvents(r *Router) int {
	n := 0
	for _, l := range r.lanes {
		n += l.holds.held()
	}
	return n
}

// queued returns the message ids in queue now, without consuming them for good (they are requeued when
// the admin channel closes, which the test does not need).
func (b *broker) queued(queue string) []string {
	b.t.Helper()
	var ids []string
	for {
		d, ok, err := b.admin.Get(queue, true)
		if err != nil {
			b.t.Fatalf("get from %s: %v", queue, err)
		}
		if !ok {
			return ids
		}
		ids = append(ids, d.MessageId)
	}
}

// publishStalled publishes evs with the broker's connection paused, waits until every event is written to
// the socket or held (held of them), and resumes: the broker's answer to the first event cannot arrive
// between two Publish calls, so what was written before the refusal is the test's choice, not the
// scheduler's.
func publishStalled(t *testing.T, r *Router, p *testenv.Proxy, c *counter, held int, evs ...cdc.Event) {
	t.Helper()
	p.Pause()
	publishAll(t, r, c, evs...)
	deadline := time.Now().Add(5 * time.Second)
	l := r.lanes[0]
	for heldEvents(r) != held || len(l.queued) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("held %d, not yet written %d; want %d held and the rest written", heldEvents(r), len(l.queued), held)
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the lane has taken the last one: let it reach the socket and uncork
	p.Resume()
}

// TestNackedEventHoldsItsAggregate: a queue with x-overflow=reject-publish and x-max-length-bytes that v1
// does not fit nacks v1; v2 of the same aggregate, which would fit, was never written, so it is not in the
// queue; an event of another aggregate published after v2 went through and is.
func TestNackedEventHoldsItsAggregate(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes = 1
	r := b.dial(cfg)
	q := b.queue("#", amqp.Table{"x-max-length-bytes": int32(4096), "x-overflow": "reject-publish"})
	v1, v2, other := event("order", "1", 1), event("order", "1", 2), event("order", "2", 1)
	v1.Payload = fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 8192))
	c := newCounter()
	publishStalled(t, r, p, c, 1, v1, v2, other)
	err := waitFailed(t, r, 10*time.Second)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.EventID != v1.ID || !strings.Contains(pe.Reason, "nack") {
		t.Fatalf("Err = %v, want a nack of %s", err, v1.ID)
	}
	time.Sleep(200 * time.Millisecond) // a v2 written after all would be routed by now
	got := b.queued(q)
	if len(got) != 1 || got[0] != other.ID {
		t.Fatalf("queue holds %q, want only %s: v2 (%s) must not overtake the nacked v1", got, other.ID, v2.ID)
	}
	if c.count(v1.ID)+c.count(v2.ID) != 0 {
		t.Fatal("done called for the nacked event or the one held behind it")
	}
	closePromptly(t, r)
	if used, _ := r.bytes.usage(); used != 0 || heldEvents(r) != 0 {
		t.Fatalf("after Close: %d bytes, %d events still held", used, heldEvents(r))
	}
}

// TestAggregateWindowTradesOrderUnderNack is the trade AggregateWindow documents: with 2, the nacked v1's
// successor v2 was written before the nack came, so it is in the queue ahead of v1's republication.
func TestAggregateWindowTradesOrderUnderNack(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes, cfg.AggregateWindow = 1, 2
	r := b.dial(cfg)
	q := b.queue("#", amqp.Table{"x-max-length-bytes": int32(4096), "x-overflow": "reject-publish"})
	v1, v2 := event("order", "1", 1), event("order", "1", 2)
	v1.Payload = fmt.Appendf(nil, `{"pad":%q}`, strings.Repeat("x", 8192))
	publishStalled(t, r, p, newCounter(), 0, v1, v2)
	err := waitFailed(t, r, 10*time.Second)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.EventID != v1.ID {
		t.Fatalf("Err = %v, want a nack of %s", err, v1.ID)
	}
	time.Sleep(200 * time.Millisecond)
	if got := b.queued(q); len(got) != 1 || got[0] != v2.ID {
		t.Fatalf("queue holds %q, want v2 (%s), written in the same round trip as the nacked v1", got, v2.ID)
	}
	closePromptly(t, r)
}

// TestReturnedEventHoldsItsAggregate: without the alternate exchange, v1 (routing key order.lost, bound
// to nothing) is returned; v2 of the same aggregate (order.changed, bound) was never written.
func TestReturnedEventHoldsItsAggregate(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.NoAlternateExchange, cfg.Lanes = true, 1
	r := b.dial(cfg)
	q := b.queue("*.changed", nil)
	v1, v2, other := event("order", "1", 1), event("order", "1", 2), event("order", "2", 1)
	v1.EventType = "lost"
	c := newCounter()
	publishStalled(t, r, p, c, 1, v1, v2, other)
	err := waitFailed(t, r, 10*time.Second)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.EventID != v1.ID || !strings.Contains(pe.Reason, "NO_ROUTE") {
		t.Fatalf("Err = %v, want a return of %s", err, v1.ID)
	}
	time.Sleep(200 * time.Millisecond)
	got := b.queued(q)
	if len(got) != 1 || got[0] != other.ID {
		t.Fatalf("queue holds %q, want only %s: v2 (%s) must not overtake the returned v1", got, other.ID, v2.ID)
	}
	if c.count(v2.ID) != 0 {
		t.Fatal("done called for the event held behind a returned one")
	}
}

// TestOtherAggregatesPassAHeldEvent: with the broker stalled, a1 is written and a2, a3 are held, while b1
// and c1, published after them, are written; once the broker answers, everything is confirmed, done is
// called in Publish order within each aggregate, and each aggregate reaches the queue in order.
func TestOtherAggregatesPassAHeldEvent(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes = 1
	r := b.dial(cfg)
	q := b.queue("#", nil)
	var mu sync.Mutex
	var doneOrder []string
	p.Pause()
	evs := []cdc.Event{event("a", "1", 1), event("a", "1", 2), event("a", "1", 3), event("b", "1", 1), event("c", "1", 1)}
	for _, ev := range evs {
		id := ev.ID
		if err := r.Publish(context.Background(), ev, func() { mu.Lock(); doneOrder = append(doneOrder, id); mu.Unlock() }); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	l := r.lanes[0]
	for heldEvents(r) != 2 || len(l.queued) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("held %d, not yet written %d; want a2 and a3 held, a1, b1 and c1 written",
				heldEvents(r), len(l.queued))
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(doneOrder) != len(evs) || indexOf(doneOrder, evs[0].ID) > indexOf(doneOrder, evs[1].ID) ||
		indexOf(doneOrder, evs[1].ID) > indexOf(doneOrder, evs[2].ID) {
		t.Fatalf("done order %q, want all five with a1, a2, a3 in order", doneOrder)
	}
	got := b.queued(q)
	if len(got) != len(evs) || indexOf(got, evs[0].ID) > indexOf(got, evs[1].ID) || indexOf(got, evs[1].ID) > indexOf(got, evs[2].ID) {
		t.Fatalf("queue order %q, want all five with a1, a2, a3 in order", got)
	}
	t.Logf("write order across aggregates: %q", got)
}

func indexOf(ids []string, id string) int {
	for i, s := range ids {
		if s == id {
			return i
		}
	}
	return -1
}

// TestHeldEventsWaitAside: with the broker stalled, a run of one aggregate (one written, the rest held)
// takes one slot of the lane's window, so Window-1 events of other aggregates are still written behind
// it; then a Publish on the full window returns on its context, and so does one that would be held past
// MaxHeld; one without a deadline returns ErrClosed on Close, and Close releases every held event's bytes;
// done is never called.
func TestHeldEventsWaitAside(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes, cfg.Window, cfg.MaxHeld = 1, 8, 20
	r := b.dial(cfg)
	b.queue("#", nil)
	c := newCounter()
	p.Pause()
	for i := range cfg.MaxHeld + 1 {
		ev := event("hot", "1", i)
		ev.Payload = bytes.Repeat([]byte("x"), 1000)
		publishAll(t, r, c, ev) // fails the test if it does not return at once
	}
	for i := range cfg.Window - 1 {
		publishAll(t, r, c, event("cold", fmt.Sprint(i), 1))
	}
	if n := heldEvents(r); n != cfg.MaxHeld {
		t.Fatalf("held %d, want %d", n, cfg.MaxHeld)
	}
	for what, ev := range map[string]cdc.Event{"a window full of written events": event("cold", "x", 1),
		"MaxHeld events held": event("hot", "1", cfg.MaxHeld+1)} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := r.Publish(ctx, ev, nil)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Publish with %s = %v, want context.DeadlineExceeded", what, err)
		}
	}
	if n := heldEvents(r); n != cfg.MaxHeld {
		t.Fatalf("after the refused Publish calls: held %d, want %d", n, cfg.MaxHeld)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- r.Publish(context.Background(), event("hot", "1", 99), nil) }()
	time.Sleep(100 * time.Millisecond)
	drained := make(chan error, 1)
	go func() { drained <- r.Drain(context.Background()) }()
	closePromptly(t, r)
	for name, ch := range map[string]chan error{"Publish": waiting, "Drain": drained} {
		select {
		case err := <-ch:
			if !errors.Is(err, ErrClosed) {
				t.Errorf("%s blocked behind held events returned %v, want ErrClosed", name, err)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s still blocked after Close", name)
		}
	}
	if used, _ := r.bytes.usage(); used != 0 || heldEvents(r) != 0 || c.t.Load() != 0 {
		t.Fatalf("after Close: %d bytes, %d held, %d done", used, heldEvents(r), c.t.Load())
	}
}

// TestHotAggregateDoesNotHoldUpOthers: 5,000 events of one aggregate are handed over at once, then one
// event of another aggregate; that one is confirmed before half of the hot aggregate's run is, and the
// hot aggregate still arrives in order. Before held events waited aside, they filled the lane's window and the other event
// waited behind the whole run.
func TestHotAggregateDoesNotHoldUpOthers(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.Lanes = 1
	r := b.dial(cfg)
	q := b.queue("#", nil)
	const n = 5000
	var hotDone atomic.Int64
	var otherAfter atomic.Int64
	otherAfter.Store(-1)
	start := time.Now()
	for i := range n {
		if err := r.Publish(context.Background(), event("hot", "1", i), func() { hotDone.Add(1) }); err != nil {
			t.Fatal(err)
		}
	}
	handedOver := time.Since(start)
	other := event("other", "1", 1)
	if err := r.Publish(context.Background(), other, func() { otherAfter.Store(hotDone.Load()) }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d events of one aggregate handed over in %s; the other aggregate's event was confirmed after %d of them, all in %s",
		n, handedOver.Round(time.Millisecond), otherAfter.Load(), time.Since(start).Round(time.Millisecond))
	if got := otherAfter.Load(); got < 0 || got > n/2 {
		t.Fatalf("the other aggregate's event was confirmed after %d of the hot aggregate's %d: it waited behind the run", got, n)
	}
	last := int64(-1)
	for _, d := range b.consume(q, n+1, 20*time.Second) {
		if d.MessageId == other.ID {
			continue
		}
		v := d.Headers[message.HeaderAggregateVersion].(int64)
		if v <= last {
			t.Fatalf("version %d delivered after %d", v, last)
		}
		last = v
	}
}

// TestOneAggregateBurst: 1,000 events of one aggregate go one confirm at a time and arrive in order;
// the rate next to that of 1,000 events of 1,000 aggregates is the cost of the holds for one aggregate.
func TestOneAggregateBurst(t *testing.T) {
	rate := func(aggregates int) float64 {
		b := newBroker(t)
		r := b.dial(b.config(""))
		q, err := b.admin.QueueDeclare(b.exchange+".q", true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.admin.QueueDelete(q.Name, false, false, false) })
		if err := b.admin.QueueBind(q.Name, "#", b.exchange, false, nil); err != nil {
			t.Fatal(err)
		}
		c := newCounter()
		start := time.Now()
		for i := range 1000 {
			ev := event("burst", fmt.Sprint(i%aggregates), i)
			publishAll(t, r, c, ev)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if err := r.Drain(ctx); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		if aggregates == 1 {
			last := int64(-1)
			for _, d := range b.consume(q.Name, 1000, 10*time.Second) {
				v := d.Headers[message.HeaderAggregateVersion].(int64)
				if v <= last {
					t.Fatalf("version %d delivered after %d", v, last)
				}
				last = v
			}
		}
		return 1000 / took.Seconds()
	}
	one, many := rate(1), rate(1000)
	t.Logf("1,000 events to a durable queue: one aggregate %.0f events/s, 1,000 aggregates %.0f events/s", one, many)
}
