package admin

import (
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/offsets"
)

// TestStatusExplainsTheLagAndTheStoredPosition: the text status says why a slot no router streams still
// shows bytes of lag (caught up, or the events that wait), and why the stored position differs from the
// slot's confirmed_flush_lsn, so that neither reads as a problem when it is none.
func TestStatusExplainsTheLagAndTheStoredPosition(t *testing.T) {
	base := Report{Slot: "s", Database: "app", SlotExists: true, ConfirmedFlush: 0x1000, LagBytes: 232, WALStatus: "reserved"}
	for _, c := range []struct {
		name string
		edit func(*Report)
		want []string
		not  []string
	}{
		{"drained stop", func(r *Report) { r.Pending = &Unpublished{} },
			[]string{"caught up: no events wait in the slot; the 232 B are WAL written after the last event"}, []string{"not caught up"}},
		{"events wait", func(r *Report) { r.Pending = &Unpublished{Inserts: 2, First: 0x1100, Last: 0x1200} },
			[]string{"not caught up: 2 unpublished events (2 inserts"}, []string{"caught up: no events"}},
		{"peek failed", func(r *Report) { r.PendingNote = "publication p does not exist" },
			[]string{"not counted: publication p does not exist"}, []string{"caught up"}},
		{"stored behind", func(r *Report) { r.Stored = &offsets.Position{LSN: 0x0F00} },
			[]string{"256 B behind confirmed flush", "harmless: a start resumes from the later of the two"}, nil},
		{"stored ahead", func(r *Report) { r.Stored = &offsets.Position{LSN: 0x1010} },
			[]string{"16 B ahead of confirmed flush"}, nil},
		{"stored equal", func(r *Report) { r.Stored = &offsets.Position{LSN: 0x1000} }, nil,
			[]string{"behind confirmed flush", "ahead of confirmed flush"}},
		{"invalidated", func(r *Report) { r.Invalidation = "wal_removed" }, []string{"invalidated:      wal_removed"}, nil},
	} {
		r := base
		c.edit(&r)
		got := r.String()
		for _, w := range c.want {
			if !strings.Contains(got, w) {
				t.Errorf("%s: status lacks %q:\n%s", c.name, w, got)
			}
		}
		for _, n := range c.not {
			if strings.Contains(got, n) {
				t.Errorf("%s: status says %q:\n%s", c.name, n, got)
			}
		}
	}
}
