package main

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/pgserver"
)

func TestSlotProblem(t *testing.T) {
	checked := time.Now()
	for _, tc := range []struct {
		name    string
		h       pgserver.SlotHealth
		minSafe int64
		want    string
	}{
		{"never read", pgserver.SlotHealth{}, 0, ""},
		{"no limit", pgserver.SlotHealth{Checked: checked, WALStatus: "reserved", MaxKeepBytes: -1}, 0, ""},
		{"plenty left, default threshold", pgserver.SlotHealth{Checked: checked, WALStatus: "reserved",
			SafeWALBytes: 900 << 20, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, 0, ""},
		{"under a tenth of the limit", pgserver.SlotHealth{Checked: checked, WALStatus: "extended",
			SafeWALBytes: 50 << 20, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, 0, "50.0 MiB from invalidation"},
		{"under the flag", pgserver.SlotHealth{Checked: checked, WALStatus: "reserved",
			SafeWALBytes: 900 << 20, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, 1 << 30, "below --min-safe-wal-bytes 1.0 GiB"},
		{"check off", pgserver.SlotHealth{Checked: checked, WALStatus: "unreserved",
			SafeWALBytes: -5, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, -1, ""},
		{"lost", pgserver.SlotHealth{Checked: checked, WALStatus: "lost"}, -1, "invalidated (wal_status lost)"},
	} {
		got := slotProblem(tc.h, tc.minSafe)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
