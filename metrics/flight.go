package metrics

import (
	"sync"
	"time"
)

// Flight is the set of a session's events handed to the publisher and not yet confirmed, in hand-over
// order, for the age of the oldest one. The stream adds in order; confirms (from the publisher's
// goroutines) remove in any order.
type Flight struct {
	mu     sync.Mutex
	handed map[uint64]time.Time // by sequence number: when the event was handed to the publisher
	low    uint64               // no event below it is unconfirmed
	next   uint64
}

// NewFlight returns an empty flight.
func NewFlight() *Flight { return &Flight{handed: map[uint64]time.Time{}} }

// Add records an event handed over at t and returns its sequence number.
func (f *Flight) Add(t time.Time) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := f.next
	f.next++
	f.handed[seq] = t
	return seq
}

// Done removes an event (confirmed, or never handed over after all).
func (f *Flight) Done(seq uint64) {
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

// Oldest is the age of the oldest unconfirmed event, zero when none is.
func (f *Flight) Oldest() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.handed[f.low]; ok {
		return time.Since(t)
	}
	return 0
}
