package replication

import (
	"sync"
	"time"
)

// flight is the set of a session's events handed to the publisher and not yet confirmed, in hand-over
// order, for the age of the oldest one. The stream adds in order; confirms (from the publisher's
// goroutines) remove in any order.
type flight struct {
	mu     sync.Mutex
	handed map[uint64]time.Time // by sequence number: when the event was handed to the publisher
	low    uint64               // no event below it is unconfirmed
	next   uint64
}

func newFlight() *flight { return &flight{handed: map[uint64]time.Time{}} }

// add records an event handed over at t and returns its sequence number.
func (f *flight) add(t time.Time) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := f.next
	f.next++
	f.handed[seq] = t
	return seq
}

// done removes an event (confirmed, or never handed over after all).
func (f *flight) done(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.handed, seq)
	for f.low < f.next {
		if _, ok := f.handed[f.low]; ok {
			break
		}
		f.low++
	}
}

// oldest is the age of the oldest unconfirmed event, zero when none is.
func (f *flight) oldest() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.handed[f.low]; ok {
		return time.Since(t)
	}
	return 0
}
