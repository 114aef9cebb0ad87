package check

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// fixedThenPublished reports whether every delivery of id, a row the router must refuse, came after the
// operator fixed it in place: from quarantine replay (x-replayed), or a backfill's copy delivered after a
// replay's fix (Event.IDs; the fix is an UPDATE at the replay's start, and a backfill publishes the row as
// the table holds it then, docs/snapshots.md).
func fixedThenPublished(h *History, id string) bool {
	var fixed time.Time
	for _, e := range h.Events {
		if e.Kind == gen.CmdReplay && slices.Contains(e.IDs, id) && (fixed.IsZero() || e.From.Before(fixed)) {
			fixed = e.From
		}
	}
	for _, d := range h.Deliv {
		if d.MessageID == id && !d.Replayed && !(d.Backfill && !fixed.IsZero() && d.At.After(fixed)) {
			return false
		}
	}
	return true
}

// checkReplays holds quarantine replay to docs/howto/handle-quarantine.md#the-commands-list-show-replay-discard-purge: a record is marked replayed only
// after the broker confirmed its event, so every record of a committed row marked replayed was delivered
// with x-replayed, as is each row the operator fixed and replayed (Event.IDs: the runner retries the
// command while it fails, three times; a row whose tries all failed stays quarantined, its record open); and a replay publishes only records (a replayed delivery is of a quarantined
// row).
func checkReplays(h *History, _ Limits) []Violation {
	rows := map[string]bool{}
	for _, r := range h.Rows {
		rows[r.ID] = true
	}
	replayed := map[string]bool{}
	for _, d := range h.Deliv {
		if d.Replayed {
			replayed[d.MessageID] = true
		}
	}
	var vs []Violation
	recorded := map[string]bool{}
	for _, q := range h.Quar {
		recorded[q.EventID] = true
		if q.Handled == "replayed" && rows[q.EventID] && !replayed[q.EventID] {
			vs = append(vs, Violation{Detail: fmt.Sprintf("quarantine record %d (event %s) is marked replayed, but its event never arrived from the replay",
				q.ID, q.EventID)})
		}
	}
	open := map[string]bool{}
	for _, q := range h.Quar {
		if q.Handled == "" {
			open[q.EventID] = true
		}
	}
	for _, e := range h.Events {
		// A replay of fixed rows whose command never succeeded (a broker restart took each of its tries:
		// seed 367) leaves their records open: those rows are quarantined with a reason, as invariant 1
		// allows. After a successful one, every fixed row must arrive replayed.
		failed := !strings.Contains(e.Note, "fixed: exit 0")
		for _, id := range e.IDs {
			if e.Kind == gen.CmdReplay && rows[id] && !replayed[id] && !(failed && open[id]) {
				vs = append(vs, Violation{Detail: fmt.Sprintf("event %s, its row fixed, was replayed at +%.2fs but never arrived replayed: %s",
					id, e.From.Sub(h.Start).Seconds(), e.Note), At: e.From})
			}
		}
	}
	for id := range replayed {
		if !recorded[id] {
			vs = append(vs, Violation{Detail: fmt.Sprintf("event %s arrived as replayed, but no quarantine record has it", id)})
		}
	}
	return compress(vs, 5)
}
