package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/quarantine"
)

// TestQuarantineRecordSaysWhatIsMissing: `quarantine show` of a minimal record (PostgreSQL refused the
// values) says so instead of showing nothing, a record with every value whole says that, and a missing key
// or event id is a dash.
func TestQuarantineRecordSaysWhatIsMissing(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	got := QuarantineRecord(quarantine.Record{ID: 7, Slot: "s", LSN: 16, Table: "public.outbox", Reason: "why", QuarantinedAt: at})
	for _, want := range []string{"id:             7\n", "values:         NULL (a minimal record", "value notes:    none (every value is whole)",
		"row key:        -\n", "event id:       -\n", "handled:        no\n", "commit lsn:     -\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
}
