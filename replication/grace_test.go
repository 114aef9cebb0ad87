package replication

import (
	"testing"
	"time"
)

// TestWithinGraceEndsTheLastWaitAtTheGrace: before the first start a wait never runs past the start-up
// grace (so giving up takes startupGrace, not up to a whole backoff more); after the start, or once the
// grace is over (a busy slot is retried for as long as it takes), the wait is the backoff's.
func TestWithinGraceEndsTheLastWaitAtTheGrace(t *testing.T) {
	now := time.Now()
	cases := []struct {
		name    string
		wait    time.Duration
		began   time.Time
		started bool
		max     time.Duration
		min     time.Duration
	}{
		{"early, short wait", time.Second, now, false, time.Second, time.Second},
		{"near the end", 20 * time.Second, now.Add(-25 * time.Second), false, 5 * time.Second, 4 * time.Second},
		{"after the grace", 20 * time.Second, now.Add(-40 * time.Second), false, 20 * time.Second, 20 * time.Second},
		{"started", 20 * time.Second, now.Add(-25 * time.Second), true, 20 * time.Second, 20 * time.Second},
	}
	for _, c := range cases {
		got := withinGrace(c.wait, c.began, c.started)
		if got > c.max || got < c.min {
			t.Errorf("%s: wait %v, want between %v and %v", c.name, got, c.min, c.max)
		}
	}
}
