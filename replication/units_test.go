package replication

import (
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestStatusDue: a moved watermark is reported at most once per ackInterval, the timer and a forced
// update (a keepalive asking for a reply, the stop) at once, and an unmoved one only on the timer.
func TestStatusDue(t *testing.T) {
	now := time.Now()
	soon, past, later := now.Add(5*time.Millisecond), now.Add(-time.Millisecond), now.Add(time.Second)
	for _, c := range []struct {
		name          string
		force         bool
		w, sent       cdc.LSN
		moveBy, timer time.Time
		want          bool
	}{
		{"moved, interval passed", false, 200, 100, past, later, true},
		{"moved, interval not passed", false, 200, 100, soon, later, false},
		{"moved, interval ends now", false, 200, 100, now, later, true},
		{"not moved, interval passed", false, 100, 100, past, later, false},
		{"not moved, timer due", false, 100, 100, soon, past, true},
		{"moved, timer due", false, 200, 100, soon, now, true},
		{"forced, not moved", true, 100, 100, soon, later, true},
		{"forced, interval not passed", true, 200, 100, soon, later, true},
	} {
		if got := statusDue(c.force, c.w, c.sent, now, c.moveBy, c.timer); got != c.want {
			t.Errorf("%s: statusDue = %v, want %v", c.name, got, c.want)
		}
	}
}
