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

// TestIsUUID: only the text form of a uuid is looked up in the outbox's id column.
func TestIsUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"0b9e7c7a-3f1e-4d2b-9a55-0123456789ab": true, "0B9E7C7A-3F1E-4D2B-9A55-0123456789AB": true,
		"0b9e7c7a3f1e4d2b9a550123456789ab": false, "0b9e7c7a-3f1e-4d2b-9a55-0123456789ag": false, "": false,
	} {
		if isUUID(s) != want {
			t.Errorf("isUUID(%q) = %v, want %v", s, !want, want)
		}
	}
}
