package route

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestUnroutableGoesToAlternateExchange: with the alternate exchange, an event no queue is bound for
// lands in <exchange>.unroutable and counts as delivered.
func TestUnroutableGoesToAlternateExchange(t *testing.T) {
	b := newBroker(t)
	r := b.dial(b.config(""))
	c := newCounter()
	ev := event("nobody", "1", 1)
	if err := r.Publish(context.Background(), ev, c.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if c.count(ev.ID) != 1 {
		t.Fatalf("done not called for the event routed to the alternate exchange")
	}
	d, ok, err := b.admin.Get(b.exchange+UnroutableSuffix, true)
	if err != nil || !ok || d.MessageId != ev.ID {
		t.Fatalf("get from %s: ok=%v err=%v id=%q, want %q", b.exchange+UnroutableSuffix, ok, err, d.MessageId, ev.ID)
	}
}

// TestReturnFailsRouterForItsOwnMessage: without the alternate exchange, routable A, unroutable B,
// routable C: A is done, B is returned and fails the Router, naming B, and B's done is never called.
func TestReturnFailsRouterForItsOwnMessage(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.NoAlternateExchange, cfg.Lanes = true, 1
	r := b.dial(cfg)
	b.queue("routable.#", nil)
	c := newCounter()
	a, bad, cc := event("routable", "1", 1), event("nowhere", "1", 2), event("routable", "1", 3)
	publishAll(t, r, c, a, bad, cc)
	err := waitFailed(t, r, 10*time.Second)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.EventID != bad.ID || !strings.Contains(pe.Reason, "NO_ROUTE") {
		t.Fatalf("Err = %v, want a *PublishError naming %s with NO_ROUTE", err, bad.ID)
	}
	if c.count(a.ID) != 1 {
		t.Errorf("done not called for A, which was routed: the return of B was matched to A")
	}
	if c.count(bad.ID) != 0 {
		t.Errorf("done called for the returned message B")
	}
	if err := r.Publish(context.Background(), event("routable", "1", 4), nil); !errors.As(err, &pe) {
		t.Errorf("Publish after failure = %v, want the router's error", err)
	}
}

// TestNackFailsRouter: a queue with x-max-length=1 and x-overflow=reject-publish nacks the second
// message; the Router fails naming it, and its done is never called.
func TestNackFailsRouter(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.Lanes = 1
	r := b.dial(cfg)
	b.queue("#", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	c := newCounter()
	first, second := event("full", "1", 1), event("full", "1", 2)
	publishAll(t, r, c, first, second)
	err := waitFailed(t, r, 10*time.Second)
	var pe *PublishError
	if !errors.As(err, &pe) || pe.EventID != second.ID || !strings.Contains(pe.Reason, "nack") {
		t.Fatalf("Err = %v, want a *PublishError for %s saying nack", err, second.ID)
	}
	if c.count(first.ID) != 1 || c.count(second.ID) != 0 {
		t.Fatalf("done counts first=%d second=%d, want 1 and 0", c.count(first.ID), c.count(second.ID))
	}
}

// TestChannelKillingPublishFailsRouter: a publish that makes the broker close the channel (here: the
// exchange was deleted under the Router, 404) fails the Router instead of hanging; done is not called.
func TestChannelKillingPublishFailsRouter(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.Lanes = 1
	r := b.dial(cfg)
	if err := b.admin.ExchangeDelete(b.exchange, false, false); err != nil {
		t.Fatal(err)
	}
	c := newCounter()
	ev := event("gone", "1", 1)
	if err := r.Publish(context.Background(), ev, c.done(ev.ID)); err != nil {
		t.Fatal(err)
	}
	err := waitFailed(t, r, 5*time.Second)
	if !errors.Is(err, ErrBrokerClosed) || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Err = %v, want ErrBrokerClosed with the broker's 404", err)
	}
	if c.count(ev.ID) != 0 {
		t.Fatal("done called for a message whose channel was closed")
	}
	if err := r.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
