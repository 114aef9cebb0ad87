package main

import (
	"fmt"
	"sync"
)

// tally matches what the writer wrote with what the consumer received. The writer adds an event id before
// its transaction commits (and takes it back on rollback), so a delivery never arrives before its id.
type tally struct {
	mu                        sync.Mutex
	pending                   map[string]bool
	written, received, others int
	done                      chan struct{} // closed when the writer stops; nil without a writer
}

func newTally(writer bool) *tally {
	t := &tally{pending: map[string]bool{}}
	if writer {
		t.done = make(chan struct{})
	}
	return t
}

func (t *tally) expect(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pending[id] = true
}

func (t *tally) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.pending, id)
}

func (t *tally) committed(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written += n
}

// arrived records a delivery; a repeated or foreign id counts as another event.
func (t *tally) arrived(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pending[id] {
		delete(t.pending, id)
		t.received++
	} else {
		t.others++
	}
}

// settled reports whether every event written so far has arrived.
func (t *tally) settled() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.pending) == 0
}

func (t *tally) finish() { close(t.done) }

func (t *tally) summary(cfg config) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var s string
	switch {
	case cfg.write && cfg.consume:
		s = fmt.Sprintf("demo: wrote %d events, received %d of them (%d missing)", t.written, t.received, len(t.pending))
	case cfg.write:
		s = fmt.Sprintf("demo: wrote %d events", t.written)
	default:
		s = fmt.Sprintf("demo: received %d events", t.others)
		return s
	}
	if t.others > 0 {
		s += fmt.Sprintf(", and %d other deliveries (earlier runs or redeliveries)", t.others)
	}
	return s
}
