package pgserver

import (
	"testing"
	"time"
)

// TestSlotCreationIsReportedForAsLongAsItWaits: the reports of a waiting slot creation come at a growing
// interval and then every minute, without end.
func TestSlotCreationIsReportedForAsLongAsItWaits(t *testing.T) {
	want := []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute, 2 * time.Minute, 3 * time.Minute}
	for i, w := range want {
		if got := creationReportAt(i); got != w {
			t.Errorf("report %d at %v, want %v", i, got, w)
		}
	}
	if got := creationReportAt(24*60 + 2); got != 24*time.Hour {
		t.Errorf("a day into the wait the report is at %v, want every minute still (24h)", got)
	}
}
