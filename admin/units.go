package admin

import (
	"fmt"
	"strings"
	"time"
)

// HumanBytes writes n bytes in binary units for people: 512 B, 2.1 MiB, 3.0 GiB.
func HumanBytes(n int64) string {
	const unit = 1024
	if n < unit && n > -unit {
		return fmt.Sprintf("%d B", n)
	}
	v, suffix := float64(n)/unit, "KiB"
	for _, s := range []string{"MiB", "GiB", "TiB", "PiB"} {
		if v < unit && v > -unit {
			break
		}
		v, suffix = v/unit, s
	}
	return fmt.Sprintf("%.1f %s", v, suffix)
}

// HumanDuration writes d for people, to the second above a minute and to the millisecond below a second:
// 0 s, 250ms, 3 s, 2m5s.
func HumanDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0 s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return fmt.Sprintf("%d s", int(d.Round(time.Second)/time.Second))
	}
	return d.Round(time.Second).String()
}

// OrDash writes s, or "-" for an empty value, in a table for people.
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// OneLine makes s one line of at most n characters for a table.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
