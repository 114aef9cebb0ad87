package route

import (
	"context"
	"errors"
	"sync"
)

// errFailed is budget.acquire's answer when the Router failed while it waited.
var errFailed = errors.New("router failed while waiting for the publish window")

// budget bounds the bytes of the unresolved publishings of a Router, across its lanes: each holds the size
// of its body and content header from Publish until it is confirmed or discarded. (The same type counts
// the Router's held events, one unit each: Config.MaxHeld.) An acquire that does
// not fit waits, except when nothing is held, so that one publishing larger than the whole budget still
// goes through, alone.
type budget struct {
	max int

	mu      sync.Mutex
	used    int
	peak    int           // the highest used so far; read by tests
	freed   chan struct{} // closed and replaced when bytes are released while an acquire waits
	waiting bool          // an acquire waits on freed
}

func newBudget(max int) *budget { return &budget{max: max, freed: make(chan struct{})} }

// acquire takes n bytes, waiting while they do not fit. It returns ctx.Err() if ctx ends first and
// errFailed if failed is closed first; then nothing was taken.
func (b *budget) acquire(ctx context.Context, failed <-chan struct{}, n int) error {
	for {
		b.mu.Lock()
		if b.used == 0 || b.used+n <= b.max {
			b.used += n
			b.peak = max(b.peak, b.used)
			b.mu.Unlock()
			return nil
		}
		freed := b.freed
		b.waiting = true
		b.mu.Unlock()
		select {
		case <-freed:
		case <-ctx.Done():
			return ctx.Err()
		case <-failed:
			return errFailed
		}
	}
}

// tryAcquire takes n if they fit now (or nothing is held), without waiting, and reports whether it did.
func (b *budget) tryAcquire(n int) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used != 0 && b.used+n > b.max {
		return false
	}
	b.used += n
	b.peak = max(b.peak, b.used)
	return true
}

// freedCh returns the channel that the next release closes, and makes that release close it: a caller
// that found no room takes it, tries once more, and waits on it, so no release between the two is missed.
func (b *budget) freedCh() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.waiting = true
	return b.freed
}

// release gives back n bytes and wakes the waiting acquires.
func (b *budget) release(n int) {
	if n == 0 {
		return
	}
	b.mu.Lock()
	b.used -= n
	if b.waiting { // every waiter wakes and checks again; one that still does not fit sets waiting again
		close(b.freed)
		b.freed, b.waiting = make(chan struct{}), false
	}
	b.mu.Unlock()
}

// usage returns the bytes held now and the most ever held.
func (b *budget) usage() (used, peak int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used, b.peak
}
