package runner_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

// consume runs p.Consume on a channel of its own until the returned stop is called; stop returns what
// Consume returned.
func (l *lab) consume(p *inbox.Processor) (stop func() error) {
	ctx, cancel := context.WithCancel(l.Ctx)
	ch := l.Channel()
	done := make(chan error, 1)
	go func() { done <- runner.Consume(ctx, p, ch, l.Queue) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Consume did not return within 10s of the cancel")
			}
		})
		return err
	}
	l.T.Cleanup(func() { stop() })
	return stop
}

// waitFor polls cond for up to ten seconds.
func (l *lab) waitFor(what string, cond func() bool) {
	l.T.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			l.T.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The consumer loop requeues a delivery whose transaction hit a real serialization failure (SQLSTATE
// 40001), with backoff, and applies it on redelivery; it records and acknowledges a message without a
// message_id and an event its handler rejects as permanent.
func TestConsumeRetriesTransientAndRecordsPermanent(t *testing.T) {
	l := newLab(t)
	serialization := 1
	l.Fault = func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if serialization == 0 {
			return nil
		}
		serialization--
		_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = 'serialization_failure'; END $$`)
		if !inbox.IsTransient(err) {
			t.Errorf("IsTransient(%v) = false, want true", err)
		}
		return err
	}
	p := l.ProcessorOn(l.Connect(), inbox.Config{RetryMin: 20 * time.Millisecond, RetryMax: 50 * time.Millisecond})
	e1 := order("42", 1, 10)
	bad := order("43", 1, 0)
	bad.Payload = []byte(`not json`)
	l.Publish(e1)
	l.Publish(bad)
	if err := l.Pub.Publish(l.Exchange, "order.OrderAmountAdded", false, false, amqp.Publishing{
		Body: []byte(`{}`), Headers: amqp.Table{"aggregate_type": "order"}}); err != nil {
		t.Fatal(err)
	}
	stop := l.consume(p)
	l.waitFor("every message settled", func() bool {
		return l.Amount("42") == 10 && l.Count(`SELECT count(*) FROM inbox.failed`) == 2 && l.Ready() == 0
	})
	if err := stop(); err != nil {
		t.Fatalf("Consume: %v", err)
	}
	want(t, "serialization failures left", serialization, 0)
	want(t, "inbox rows", l.Count(`SELECT count(*) FROM inbox.inbox`), 1)
	want(t, "permanent", l.Count(`SELECT count(*) FROM inbox.failed WHERE reason = 'permanent' AND event_id = $1`, bad.ID), 1)
	want(t, "malformed", l.Count(`SELECT count(*) FROM inbox.failed WHERE reason = 'malformed' AND event_id IS NULL`), 1)
	want(t, "queue after stop", l.Ready(), 0)
	summary(t, "published=3 serialization-retries=1 applied=%d inbox=%d failed=permanent:1,malformed:1 amount=%d",
		l.Handled.Load(), l.Count(`SELECT count(*) FROM inbox.inbox`), l.Amount("42"))
}

// Cancelling the context stops the loop cleanly: the delivery in progress rolls back, every delivery
// the consumer held goes back to the queue, and Consume returns nil.
func TestConsumeStopsCleanlyOnCancel(t *testing.T) {
	l := newLab(t)
	started := make(chan struct{})
	var once sync.Once
	var block atomic.Bool
	block.Store(true)
	l.Fault = func(ctx context.Context, _ pgx.Tx, _ inbox.Event) error {
		if !block.Load() {
			return nil
		}
		once.Do(func() { close(started) })
		<-ctx.Done()
		return ctx.Err()
	}
	p := l.ProcessorOn(l.Connect(), inbox.Config{Prefetch: 4})
	for v := int64(1); v <= 5; v++ {
		l.Publish(order("42", v, 10))
	}
	stop := l.consume(p)
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never ran")
	}
	begun := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Consume after cancel = %v, want nil", err)
	}
	took := time.Since(begun)
	l.waitFor("all five messages back in the queue", func() bool { return l.Ready() == 5 })
	want(t, "inbox rows", l.Count(`SELECT count(*) FROM inbox.inbox`), 0)
	want(t, "amount", l.Amount("42"), 0)

	block.Store(false)
	stop = l.consume(l.ProcessorOn(l.Connect(), inbox.Config{}))
	l.waitFor("the requeued messages applied", func() bool { return l.Amount("42") == 50 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	summary(t, "published=5 prefetch=4 stopped-in=%s requeued=5 inbox-after-stop=0 then applied=%d amount=%d",
		took.Round(time.Millisecond), l.Handled.Load(), l.Amount("42"))
}
