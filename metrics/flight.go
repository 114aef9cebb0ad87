package metrics

import (
	"math"
	"sync"
	"time"
)

// Flight is the set of a session's events handed to the publisher and not yet confirmed, in hand-over
// order, for the age of the oldest one. The stream adds in order; confirms (from the publisher's
// goroutines) remove in any order. An event costs 8 bytes while it is in flight (a queue by sequence
// number, not a map: up to route's MaxHeld plus the window are in flight at once).
type Flight struct {
	mu     sync.Mutex
	start  time.Time // handed times are kept as offsets from it
	handed []int64   // from handed[head], sequence numbers low to next-1: when each was handed over, since start; gone once confirmed
	head   int
	low    uint64 // no event below it is unconfirmed
	next   uint64
}

// gone marks a confirmed event in Flight.handed.
const gone = math.MinInt64

// NewFlight returns an empty flight.
func NewFlight() *Flight { return &Flight{start: time.Now()} }

// Add records an event handed over at t and returns its sequence number.
func (f *Flight) Add(t time.Time) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	seq := f.next
	f.next++
	if f.head > 0 && f.head >= len(f.handed)/2 && len(f.handed) == cap(f.handed) { // reuse the confirmed front
		f.handed = f.handed[:copy(f.handed, f.handed[f.head:])]
		f.head = 0
	}
	f.handed = append(f.handed, int64(t.Sub(f.start)))
	return seq
}

// Done removes an event (confirmed, or never handed over after all).
func (f *Flight) Done(seq uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if seq < f.low || seq >= f.next {
		return
	}
	f.handed[f.head+int(seq-f.low)] = gone
	for f.head < len(f.handed) && f.handed[f.head] == gone {
		f.head++
		f.low++
	}
	if f.head == len(f.handed) {
		f.handed, f.head = f.handed[:0], 0
	}
}

// Oldest is the age of the oldest unconfirmed event, zero when none is.
func (f *Flight) Oldest() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.head == len(f.handed) {
		return 0
	}
	return time.Since(f.start) - time.Duration(f.handed[f.head])
}
