package record

import (
	"sync"

	"github.com/cdc-router/cdc-router/chaos/check"
)

// Recorder is the History being written by the runner's goroutines.
type Recorder struct {
	mu sync.Mutex
	h  check.History
}

// With calls f with the History under the Recorder's lock: f may read it or set its fields.
func (r *Recorder) With(f func(h *check.History)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f(&r.h)
}

// History is the recorded history, for the end of a run, once nothing records any more.
func (r *Recorder) History() *check.History { return &r.h }

// Event records a fault, an operator command or another event of the run.
func (r *Recorder) Event(e check.Event) {
	r.With(func(h *check.History) { h.Events = append(h.Events, e) })
}

// Delivery records a message the consumer received.
func (r *Recorder) Delivery(d check.Delivery) {
	r.With(func(h *check.History) { h.Deliv = append(h.Deliv, d) })
}

// Sample records one answer of a /readyz.
func (r *Recorder) Sample(s check.Sample) {
	r.With(func(h *check.History) { h.Ready = append(h.Ready, s) })
}

// Log records one line of a router's or a command's output.
func (r *Recorder) Log(l check.LogLine) {
	r.With(func(h *check.History) { h.Logs = append(h.Logs, l) })
}

// Delivered is the set of message ids received so far.
func (r *Recorder) Delivered() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	m := make(map[string]bool, len(r.h.Deliv))
	for _, d := range r.h.Deliv {
		m[d.MessageID] = true
	}
	return m
}
