package admin

import (
	"testing"
	"time"
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
