package check

import (
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// driftSlack is how long after a FaultDrift's restore a row the writer saw commit may still have been
// written with the drifted column: it committed before the restore took its lock, and the writer heard so a
// moment later.
const driftSlack = time.Second

// driftReason reports whether a quarantine reason is the drift of a FaultDrift: public.outbox's headers
// decoded as text (decode's shapeDrift: "column headers is text, want jsonb or json").
func driftReason(reason string) bool { return strings.Contains(reason, "column headers is text") }

// driftExitText reports whether a router's line is the drift refusal, naming the fix: the stream's
// (decode.DriftError: "refusing the insert at … because column headers is text …: restore the column (…),
// then start once with --on-drift=quarantine …"), or the start's check of the table (a router starting
// while the column is drifted: "the outbox table … does not have the expected shape (column headers is
// text, …): alter it to have the columns …"; seed 17).
//
// For the other table of the second FaultDrift (public.chaos_other in the publication): the stream's
// refusal ("refusing the insert at … into public.chaos_other because table public.chaos_other is in the
// publication but is not …: … remove it from the publication …") or the start's check of the publication
// ("publication … also publishes public.chaos_other, …: run ALTER PUBLICATION … DROP TABLE …").
func driftExitText(text string) bool {
	stream := strings.Contains(text, "refusing the insert at") && strings.Contains(text, "--on-drift=quarantine")
	start := strings.Contains(text, "does not have the expected shape") && strings.Contains(text, "alter it to have the columns")
	if strings.Contains(text, otherTable) {
		other := strings.Contains(text, "is in the publication but is not") && stream
		return other || strings.Contains(text, "also publishes") && strings.Contains(text, "DROP TABLE")
	}
	return driftReason(text) && (stream || start)
}

// otherTable is the table the second FaultDrift adds to the publication.
const otherTable = "public.chaos_other"

// inDrift reports whether t falls inside a FaultDrift, or within bound after its restore.
func inDrift(h *History, t time.Time, bound time.Duration) bool {
	_, ok := eventAround(h, gen.FaultDrift, t, bound)
	return ok
}

// driftQuarantine reports whether a valid row committed at `committed` was quarantined for the drift of a
// FaultDrift it was written in: the reason names the drift and the commit falls in the drift's window.
func driftQuarantine(h *History, reason string, committed time.Time) bool {
	return driftReason(reason) && inDrift(h, committed, driftSlack)
}

// driftExit reports whether a router's exit was the drift refusal (without --on-drift=quarantine, the
// router stops before the first drifted row, naming the fix) while the column was drifted or within the
// stall bound after its restore, when the harness's next start has the flag: held behind a refusal that
// names the fix, not a restart loop.
func driftExit(h *History, exit Event, l Limits) bool {
	return driftExitText(exit.Note) && inDrift(h, exit.From, l.Stall)
}
