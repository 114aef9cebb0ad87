package replication

import (
	"context"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// stuckPublisher is a Publisher whose Close blocks until release is closed, like a close handshake with a
// stalled broker.
type stuckPublisher struct{ release chan struct{} }

func (p stuckPublisher) Publish(context.Context, cdc.Event, func()) error { return nil }
func (p stuckPublisher) Failed() <-chan struct{}                          { return nil }
func (p stuckPublisher) Err() error                                       { return nil }
func (p stuckPublisher) Drain(context.Context) error                      { return nil }
func (p stuckPublisher) Close() error                                     { <-p.release; return nil }

// TestStopClockBoundsTheStop: before a stop nothing is bounded; after it, reading ends a reserve before the
// shutdown timeout and closing a stuck publisher ends at the timeout.
func TestStopClockBoundsTheStop(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := newStopClock(ctx, time.Second)
	if !c.readBy().IsZero() || !c.end().IsZero() {
		t.Fatal("a stop deadline before the stop was requested")
	}
	p := stuckPublisher{release: make(chan struct{})}
	defer close(p.release)
	go func() { time.Sleep(100 * time.Millisecond); cancel() }()
	began := time.Now()
	if c.closeWithin(p) {
		t.Fatal("closeWithin reported a stuck publisher as closed")
	}
	took := time.Since(began)
	if took < time.Second || took > 1300*time.Millisecond {
		t.Errorf("closeWithin returned after %v, want the stop's end (1.1 s after the call)", took)
	}
	if d := c.end().Sub(c.readBy()); d != 200*time.Millisecond {
		t.Errorf("close reserve %v, want a fifth of the shutdown timeout", d)
	}
}

// TestStopClockBoundsPostgreSQLWaits: a query the stream waits on ends after its own bound while no stop
// is requested, and at the stop's end once one is, whichever comes first.
func TestStopClockBoundsPostgreSQLWaits(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	c := newStopClock(ctx, 500*time.Millisecond)
	short, done := c.bounded(100 * time.Millisecond)
	<-short.Done()
	done()
	long, done := c.bounded(30 * time.Second)
	defer done()
	select {
	case <-long.Done():
		t.Fatal("a bounded wait ended before its bound and without a stop")
	case <-time.After(200 * time.Millisecond):
	}
	began := time.Now()
	cancel()
	select {
	case <-long.Done():
		if took := time.Since(began); took < 400*time.Millisecond || took > 800*time.Millisecond {
			t.Errorf("the wait ended %v after the stop request, want the stop's end (500 ms)", took)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a wait of 30 s outlived the stop's end")
	}
	after, done := c.bounded(30 * time.Second) // begun during the stop
	defer done()
	select {
	case <-after.Done():
	case <-time.After(time.Second):
		t.Fatal("a wait begun during the stop outlived the stop's end")
	}
}
