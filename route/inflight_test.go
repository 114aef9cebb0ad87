package route

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

func TestBudget(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	never := make(chan struct{})
	if err := b.acquire(ctx, never, 250); err != nil { // larger than the budget, but nothing is held
		t.Fatalf("acquire of an oversized amount on an empty budget: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.acquire(short, never, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("acquire over the budget = %v, want it to wait until its context ends", err)
	}
	got := make(chan error, 1)
	go func() { got <- b.acquire(ctx, never, 60) }()
	select {
	case err := <-got:
		t.Fatalf("acquire returned %v while 250 bytes were held", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.release(250)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	failed := make(chan struct{})
	go func() { got <- b.acquire(ctx, failed, 41) }()
	time.Sleep(20 * time.Millisecond)
	close(failed)
	if err := <-got; !errors.Is(err, errFailed) {
		t.Fatalf("acquire when the router fails = %v, want errFailed", err)
	}
	if used, peak := b.usage(); used != 60 || peak != 250 {
		t.Fatalf("usage = %d, peak %d; want 60 and 250", used, peak)
	}
}

// bigEvent is an event of aggregate agg with a payload of n bytes.
func bigEvent(agg string, i, n int) cdc.Event {
	ev := event("big", agg, i)
	ev.Payload = bytes.Repeat([]byte("x"), n)
	return ev
}

// TestByteWindowBoundsInflight: 48 events of 1 MiB over 4 lanes with MaxInflightBytes of 4 MiB, published
// while the broker's connection is paused, so that nothing is confirmed until the bytes held reach the
// bound: the bytes held never pass it (sampled by the budget itself, at every acquire), the window is used
// (more than one event in flight), and everything is released once confirmed. (Without the pause a broker
// that confirms each 1 MiB message before the next is built leaves one in flight at a time: a CI run.)
func TestByteWindowBoundsInflight(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.MaxInflightBytes = 4 << 20
	r := b.dial(cfg)
	b.queue("#", nil)
	c := newCounter()
	p.Pause()
	published := make(chan error, 1)
	go func() {
		for i := range 48 {
			ev := bigEvent(fmt.Sprint(i%8), i, 1<<20)
			if err := r.Publish(context.Background(), ev, c.done(ev.ID)); err != nil {
				published <- fmt.Errorf("Publish %s: %w", ev.ID, err)
				return
			}
		}
		published <- nil
	}()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if used, _ := r.bytes.usage(); used >= 2<<20 {
			break
		}
		if time.Now().After(deadline) {
			used, _ := r.bytes.usage()
			t.Fatalf("with the broker paused, %d bytes in flight after 20 s, want 2 MiB or more", used)
		}
	}
	p.Resume()
	if err := <-published; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	used, peak := r.bytes.usage()
	t.Logf("48 x 1 MiB, bound %d bytes: peak in flight %d bytes (%.1f events)", cfg.MaxInflightBytes, peak, float64(peak)/(1<<20))
	if peak > cfg.MaxInflightBytes || peak < 2<<20 {
		t.Errorf("peak in flight %d bytes, want between 2 MiB and the bound %d", peak, cfg.MaxInflightBytes)
	}
	if used != 0 || c.t.Load() != 48 {
		t.Errorf("after Drain: %d bytes still held, %d of 48 done", used, c.t.Load())
	}
}

// TestByteWindowAdmitsOneLargeEvent: an event larger than MaxInflightBytes goes through when nothing else
// is in flight, and the events after it follow.
func TestByteWindowAdmitsOneLargeEvent(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.MaxInflightBytes = 1 << 20
	r := b.dial(cfg)
	b.queue("#", nil)
	c := newCounter()
	publishAll(t, r, c, bigEvent("1", 1, 3<<20), bigEvent("2", 2, 3<<20), event("small", "1", 3))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	if used, peak := r.bytes.usage(); used != 0 || peak < 3<<20 || peak > 3<<20+4096 {
		t.Errorf("used %d, peak %d; want 0 and one 3 MiB event at a time", used, peak)
	}
	if c.t.Load() != 3 {
		t.Fatalf("%d of 3 events done", c.t.Load())
	}
}

// TestByteWindowWaitAndRelease: with the broker stalled, a Publish waiting for bytes returns on its
// context without enqueueing the event; Close releases every byte held, and a Publish still waiting
// returns ErrClosed.
func TestByteWindowWaitAndRelease(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.MaxInflightBytes = 1 << 20
	r := b.dial(cfg)
	p.Pause()
	publishAll(t, r, newCounter(), bigEvent("1", 1, 600<<10))
	held, _ := r.bytes.usage()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if err := r.Publish(ctx, bigEvent("2", 2, 600<<10), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish over the byte bound = %v, want context.DeadlineExceeded", err)
	}
	if used, _ := r.bytes.usage(); used != held {
		t.Fatalf("a Publish that returned on its context holds %d bytes", used-held)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- r.Publish(context.Background(), bigEvent("3", 3, 600<<10), nil) }()
	time.Sleep(100 * time.Millisecond)
	closePromptly(t, r)
	if err := <-waiting; !errors.Is(err, ErrClosed) {
		t.Fatalf("waiting Publish returned %v, want ErrClosed", err)
	}
	if used, _ := r.bytes.usage(); used != 0 {
		t.Fatalf("%d bytes still held after Close", used)
	}
}

// TestBodyNotRetained: once a message is written, neither the Router nor amqp091 keeps its body: the
// garbage collector frees it while its confirm is still outstanding (the broker is stalled).
func TestBodyNotRetained(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	r := b.dial(b.config(b.viaProxy(p)))
	p.Pause()
	var freed atomic.Bool
	func() {
		body := new([64 << 10]byte)
		runtime.SetFinalizer(body, func(*[64 << 10]byte) { freed.Store(true) })
		ev := event("retain", "1", 1)
		ev.Payload = body[:]
		if err := r.Publish(context.Background(), ev, nil); err != nil {
			t.Fatal(err)
		}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for !freed.Load() && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
	if !freed.Load() {
		t.Fatal("the body of a written, unconfirmed message is still referenced after 5 s")
	}
	if used, _ := r.bytes.usage(); used == 0 {
		t.Fatal("the unconfirmed message holds no bytes of the window")
	}
	p.Resume()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
}

// BenchmarkTrack is the Router's count of unresolved events for an event alone in flight (a trickle: the
// count leaves zero and comes back for each), with no Drain waiting.
func BenchmarkTrack(b *testing.B) {
	r := &Router{failed: make(chan struct{})}
	b.ReportAllocs()
	for b.Loop() {
		r.track(1)
		r.track(-1)
	}
}

// TestDrainWaitsForTheLast: Drain returns at once with nothing unresolved, waits while anything is (every
// Drain that waits, also one whose context ended before), and returns once the last is resolved.
func TestDrainWaitsForTheLast(t *testing.T) {
	r := &Router{failed: make(chan struct{})}
	if err := r.Drain(context.Background()); err != nil {
		t.Fatalf("Drain with nothing in flight: %v", err)
	}
	r.track(2)
	short, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := r.Drain(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Drain with 2 in flight returned %v before its context ended", err)
	}
	done := make(chan error, 2)
	for range 2 {
		go func() { done <- r.Drain(context.Background()) }()
	}
	r.track(-1)
	select {
	case err := <-done:
		t.Fatalf("Drain returned %v with 1 still in flight", err)
	case <-time.After(50 * time.Millisecond):
	}
	r.track(1)
	r.track(-2)
	for range 2 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Drain: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Drain still waits with nothing in flight")
		}
	}
	r.track(1)
	r.track(-1)
	if err := r.Drain(context.Background()); err != nil {
		t.Fatalf("Drain after the count came back to zero: %v", err)
	}
}
