package replication

import (
	"context"
	"sync/atomic"
	"time"
)

// stopClock is the one bound of a stop: --shutdown-timeout counted from the moment the stop was requested
// (ctx ended), whatever the router was waiting for then. Reading on to the commit of the open transaction
// and draining confirms end at readBy; the final status update, closing the publisher and closing the
// PostgreSQL connections end at end. Every wait of a stream run consults it.
type stopClock struct {
	ctx     context.Context
	timeout time.Duration
	at      atomic.Int64 // UnixNano of the stop request; 0 while none
}

// newStopClock starts watching ctx for a stop request.
func newStopClock(ctx context.Context, timeout time.Duration) *stopClock {
	c := &stopClock{ctx: ctx, timeout: timeout}
	context.AfterFunc(ctx, func() { c.requested() })
	return c
}

// requested returns when the stop was requested, or zero while ctx runs. It stamps the request itself
// when it sees ctx ended before the AfterFunc ran.
func (c *stopClock) requested() time.Time {
	if at := c.at.Load(); at != 0 {
		return time.Unix(0, at)
	}
	if c.ctx.Err() == nil {
		return time.Time{}
	}
	c.at.CompareAndSwap(0, time.Now().UnixNano())
	return time.Unix(0, c.at.Load())
}

// closeReserve is the part of the shutdown timeout kept for the final status update and the closes.
func (c *stopClock) closeReserve() time.Duration { return min(c.timeout/5, 2*time.Second) }

// readBy is when reading on to the commit and draining confirms must end; zero while no stop is requested.
func (c *stopClock) readBy() time.Time {
	at := c.requested()
	if at.IsZero() {
		return at
	}
	return at.Add(c.timeout - c.closeReserve())
}

// end is when the whole stop must be over; zero while no stop is requested.
func (c *stopClock) end() time.Time {
	at := c.requested()
	if at.IsZero() {
		return at
	}
	return at.Add(c.timeout)
}

// copyBounds bounds a snapshot copy that a stop interrupted (snapshot.Config.StopBy): it waits for the
// confirms of the rows already published until settle, and stores how far they reach by end, which leaves
// the rest of the shutdown timeout to closing the publisher and the connections. A copy whose context ended
// without a stop (the silence probe's watch, or the slot lock's lease: slotlock.go) gets bounds already
// passed: it waits for nothing.
func (c *stopClock) copyBounds() (settle, end time.Time) {
	by := c.readBy()
	return by.Add(-c.closeReserve()), by
}

// bounded is the context of one query the stream waits on (a quarantine record, a check due while
// streaming): it ends after d, and at the stop's end once a stop is requested, so that a PostgreSQL that
// stopped answering holds up no stop for longer than its bound.
func (c *stopClock) bounded(d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	unwatch := context.AfterFunc(c.ctx, func() { time.AfterFunc(time.Until(c.end()), cancel) })
	return ctx, func() { unwatch(); cancel() }
}

// closeContext bounds closing a connection: by the stop's end during a stop, by a few seconds otherwise
// (a restart must not hang on a dead peer either). pgconn closes the socket even when it expires.
func (c *stopClock) closeContext() (context.Context, context.CancelFunc) {
	if end := c.end(); !end.IsZero() {
		return context.WithDeadline(context.Background(), end)
	}
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// closeWithin closes pub and waits for it no longer than the stop allows. route.Router bounds its own
// close at about 5 s on a stalled broker (close handshake, then its goroutines), which alone can exceed a
// short --shutdown-timeout; past the stop's end the close goes on in the background and the process exits.
func (c *stopClock) closeWithin(pub Publisher) bool {
	done := make(chan struct{})
	go func() { pub.Close(); close(done) }()
	select {
	case <-done:
		return true
	case <-c.ctx.Done():
	}
	t := time.NewTimer(time.Until(c.end()))
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}
