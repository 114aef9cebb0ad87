package route

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// closePromptly closes r and fails the test if that takes more than a few seconds.
func closePromptly(t *testing.T, r *Router) {
	t.Helper()
	start := time.Now()
	r.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Close took %s", d)
	}
}

// TestCutWhileInFlight: the proxy stops forwarding while a window is in flight, then cuts the
// connection: the Router fails within a few seconds, done is never called for the unconfirmed events,
// and Close returns promptly.
func TestCutWhileInFlight(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	r := b.dial(b.config(b.viaProxy(p)))
	b.queue("#", nil)
	c := newCounter()
	p.Pause()
	for i := range 200 {
		ev := event("cut", string(rune('a'+i%20)), i)
		if err := r.Publish(context.Background(), ev, c.done(ev.ID)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(200 * time.Millisecond)
	p.Cut()
	start := time.Now()
	err := waitFailed(t, r, 5*time.Second)
	t.Logf("failed %s after the cut: %v", time.Since(start).Round(time.Millisecond), err)
	if !errors.Is(err, ErrBrokerClosed) {
		t.Errorf("Err = %v, want ErrBrokerClosed", err)
	}
	if n := c.t.Load(); n != 0 {
		t.Errorf("done called %d times for messages that were never confirmed", n)
	}
	closePromptly(t, r)
	if n := c.t.Load(); n != 0 {
		t.Errorf("done called %d times after Close", n)
	}
	if used, _ := r.bytes.usage(); used != 0 {
		t.Errorf("%d bytes of the publish window still held after the failure and Close", used)
	}
}

// TestConfirmTimeout: a confirm that does not come within ConfirmTimeout fails the Router.
func TestConfirmTimeout(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.ConfirmTimeout = time.Second
	r := b.dial(cfg)
	c := newCounter()
	p.Pause()
	ev := event("slow", "1", 1)
	publishAll(t, r, c, ev)
	err := waitFailed(t, r, 5*time.Second)
	if !errors.Is(err, ErrConfirmTimeout) {
		t.Fatalf("Err = %v, want ErrConfirmTimeout", err)
	}
	closePromptly(t, r)
	if c.count(ev.ID) != 0 {
		t.Fatal("done called for an unconfirmed message")
	}
}

// TestConfirmTimeoutCountsFromEachWrite: the lane's one confirm timer, still armed for an earlier event's
// deadline, does not fail a later event before its own ConfirmTimeout has passed since it was written.
func TestConfirmTimeoutCountsFromEachWrite(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes, cfg.ConfirmTimeout = 1, time.Second
	r := b.dial(cfg)
	c := newCounter()
	first := event("timer", "1", 1)
	publishAll(t, r, c, first)
	if err := r.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(600 * time.Millisecond) // the timer, armed for first, fires 400 ms from now
	p.Pause()
	second := event("timer", "1", 2)
	at := time.Now()
	publishAll(t, r, c, second)
	err := waitFailed(t, r, 5*time.Second)
	if !errors.Is(err, ErrConfirmTimeout) {
		t.Fatalf("Err = %v, want ErrConfirmTimeout", err)
	}
	if took := time.Since(at); took < 900*time.Millisecond {
		t.Fatalf("the second event timed out %v after it was published, before its ConfirmTimeout of 1s", took)
	}
	closePromptly(t, r)
}

// TestCloseWhileBlocked: with the broker stalled, the window full and the lane's writer stuck in a
// socket write, a Publish waiting for the window returns on its context, Close returns promptly, and a
// Publish still waiting then returns ErrClosed.
func TestCloseWhileBlocked(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes, cfg.Window = 1, 4
	r := b.dial(cfg)
	p.Pause()
	big := bytes.Repeat([]byte("x"), 4<<20) // several MiB per message fill the socket buffers
	for i := range cfg.Window {
		ev := event("blocked", fmt.Sprint(i), i) // one aggregate each: all are written, none held
		ev.Payload = big
		if err := r.Publish(context.Background(), ev, nil); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := r.Publish(ctx, event("blocked", "1", 99), nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Publish on a full window = %v, want context.DeadlineExceeded", err)
	}
	waiting := make(chan error, 1)
	go func() { waiting <- r.Publish(context.Background(), event("blocked", "1", 100), nil) }()
	time.Sleep(100 * time.Millisecond)
	closePromptly(t, r)
	select {
	case err := <-waiting:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("blocked Publish returned %v, want ErrClosed", err)
		}
		if used, _ := r.bytes.usage(); used != 0 {
			t.Fatalf("%d bytes of the publish window still held after Close", used)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Publish still blocked after Close")
	}
}
