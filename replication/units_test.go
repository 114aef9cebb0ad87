package replication

import (
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

func TestHumanUnits(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 2202009: "2.1 MiB",
		3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB"} {
		if got := HumanBytes(n); got != want {
			t.Errorf("HumanBytes(%d) = %q, want %q", n, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0 s", -time.Second: "0 s", 250 * time.Millisecond: "250ms",
		3100 * time.Millisecond: "3 s", 125 * time.Second: "2m5s"} {
		if got := HumanDuration(d); got != want {
			t.Errorf("HumanDuration(%v) = %q, want %q", d, got, want)
		}
	}
}

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
