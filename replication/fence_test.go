package replication

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// fakeClock is a clock the test moves; its times carry no monotonic reading, so elapsed reads the wall clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }
func (c *fakeClock) ticks(f *Fence, d time.Duration) { // the process runs for d, seen every fenceTick
	for end := c.t.Add(d); c.t.Before(end); {
		c.advance(fenceTick)
		f.mu.Lock()
		f.observe(c.t)
		f.mu.Unlock()
	}
}

func newTestFence(lease time.Duration) (*Fence, *fakeClock) {
	c := &fakeClock{t: time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)}
	f := NewFence(lease)
	f.now = c.now
	return f, c
}

// TestFenceHoldsWhileStatusUpdatesRenewIt: a running stream that sends a status update every second keeps
// the lease (10 s) for as long as it runs; no write goes before a run holds the lock, nor after it ended.
func TestFenceHoldsWhileStatusUpdatesRenewIt(t *testing.T) {
	f, c := newTestFence(10 * time.Second)
	if err := f.Check(); !errors.Is(err, errFenced) {
		t.Fatalf("Check before a run holds the lock = %v, want an error wrapping errFenced", err)
	}
	f.begin(c.now())
	for i := 0; i < 60; i++ {
		c.ticks(f, time.Second)
		f.sent(c.now())
		if err := f.Check(); err != nil {
			t.Fatalf("after %d s of status updates every second: %v", i+1, err)
		}
	}
	f.end()
	if err := f.Check(); err == nil || !strings.Contains(err.Error(), "has ended") {
		t.Fatalf("Check after the run ended = %v, want the run's end", err)
	}
	var nilFence *Fence
	if nilFence.Check() != nil || nilFence.Lease() != 0 {
		t.Fatal("a nil Fence fences")
	}
}

// TestFenceLapsesWithoutStatusUpdates: half of --lease without a status update (a wedged session) breaks it,
// and a status update sent after that does not mend it (PostgreSQL may have ended the session meanwhile); a
// grant (PostgreSQL's answer on the lock's session) renews a lapsed lease that no write found lapsed, and
// the next run's begin mends a broken one.
func TestFenceLapsesWithoutStatusUpdates(t *testing.T) {
	f, c := newTestFence(10 * time.Second)
	f.begin(c.now())
	c.ticks(f, 4900*time.Millisecond)
	if err := f.Check(); err != nil {
		t.Fatalf("4.9 s into a 10 s lease: %v", err)
	}
	c.ticks(f, 200*time.Millisecond)
	err := f.Check()
	if err == nil || !strings.Contains(err.Error(), "half of --lease (10s)") {
		t.Fatalf("5.1 s without a status update = %v, want the lapsed lease", err)
	}
	f.sent(c.now())
	if f.Check() == nil {
		t.Fatal("a status update after the lease lapsed mended it")
	}
	f.begin(c.now())
	if err := f.Check(); err != nil {
		t.Fatalf("after the next run's begin: %v", err)
	}

	// A lapse nothing was written in, then START_REPLICATION's answer: the lease holds again.
	c.ticks(f, 6*time.Second)
	f.grant(c.now(), f.valid())
	if err := f.Check(); err != nil {
		t.Fatalf("after a grant: %v", err)
	}
}

// TestFenceBreaksOnAPause: a gap in the process's own running longer than a second (SIGSTOP) breaks the
// lease however fresh it is, on the next use of the fence; shorter gaps (a busy machine) do not. A gap the
// wall clock shows while the monotonic clock stood still (a suspended machine) counts too.
func TestFenceBreaksOnAPause(t *testing.T) {
	f, c := newTestFence(30 * time.Second)
	f.begin(c.now())
	c.ticks(f, time.Second)
	c.advance(900 * time.Millisecond) // held up, but less than the jump bound
	f.sent(c.now())
	if err := f.Check(); err != nil {
		t.Fatalf("after a 0.9 s gap: %v", err)
	}
	c.ticks(f, time.Second)
	c.advance(3 * time.Second) // SIGSTOP ... SIGCONT
	if err := f.Broken(); err == nil || !strings.Contains(err.Error(), "held up for 3s") {
		t.Fatalf("Broken after a 3 s pause = %v, want the pause: every write to the broker's socket is refused", err)
	}
	err := f.Check()
	if err == nil || !strings.Contains(err.Error(), "held up for 3s") || !errors.Is(err, errFenced) {
		t.Fatalf("Check after a 3 s pause = %v, want the pause", err)
	}
	f.sent(c.now())
	c.ticks(f, time.Second)
	if f.Check() == nil {
		t.Fatal("status updates after the pause mended the fence")
	}
	if got := causeOf(caused("broker", err)); got != "postgres" {
		t.Fatalf("cause of a fenced publisher's failure = %q, want postgres", got)
	}

	f.end()
	if err := f.Broken(); err != nil {
		t.Fatalf("Broken with no run holding the lock = %v, want nil (a standby's probe writes freely)", err)
	}

	// The first to see the gap may be a status update or the tick rather than a write.
	f.begin(c.now())
	c.ticks(f, time.Second)
	c.advance(2 * time.Second)
	f.sent(c.now())
	if f.Check() == nil {
		t.Fatal("a pause first seen by a status update did not break the fence")
	}

	// Monotonic time: a real clock whose wall reading jumped while the monotonic one did not.
	m := time.Now()
	if got := elapsed(m, m.Add(time.Millisecond)); got != time.Millisecond {
		t.Fatalf("elapsed = %v, want 1ms", got)
	}
	wallJump := m.Round(0).Add(5 * time.Second) // no monotonic reading: compared on the wall clock
	if got := elapsed(m, wallJump); got < 5*time.Second {
		t.Fatalf("elapsed over a 5 s wall-clock jump = %v", got)
	}
}

// TestFenceJumpBoundIsAQuarterOfShortLeases: a lease of 2 s takes a 600 ms gap as a pause.
func TestFenceJumpBoundIsAQuarterOfShortLeases(t *testing.T) {
	f, c := newTestFence(2 * time.Second)
	f.begin(c.now())
	c.advance(600 * time.Millisecond)
	if f.Check() == nil {
		t.Fatal("a 600 ms gap under a 2 s lease did not break the fence")
	}
}
