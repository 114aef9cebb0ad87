package check

import (
	"testing"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// A FaultDrift from +1.5 to +3 s: the row written meanwhile is quarantined with the drift as the reason,
// and the router's exits on the drift refusal inside the window and the bound after it are no restart loop.
func TestDriftQuarantineAndRefusal(t *testing.T) {
	const reason = "column headers is text, want jsonb or json"
	exit := `exit 1: level=ERROR msg="exiting: the router does not retry this" error="decode: refusing the insert at 0/1A into public.outbox because ` +
		reason + `: restore the column (ALTER TABLE public.outbox ALTER COLUMN headers TYPE jsonb USING headers::jsonb), then start once with --on-drift=quarantine to quarantine the rows written meanwhile"`
	drifted := func() *History {
		h := clean()
		h.Deliv = h.Deliv[:2]
		h.Quar = []Quarantined{{EventID: "c", Reason: reason, At: at(4)}}
		h.Events = []Event{{From: at(1.5), To: at(3), Kind: gen.FaultDrift, Note: "headers text, then jsonb again"}}
		return h
	}
	// A router that starts while the column is drifted refuses at its start's check of the table.
	start := `exit 1: level=ERROR msg="exiting: the router does not retry this" error="the outbox table public.outbox does not have the expected shape (` +
		reason + `): alter it to have the columns id uuid, …"`
	h := drifted()
	for i, s := range []float64{2.1, 2.6, 3.2, 3.9, 4.5} {
		note := exit
		if i%2 == 1 {
			note = start
		}
		h.Events = append(h.Events, Event{From: at(s), To: at(s), Kind: KindRouterExit, Note: note})
	}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a drifted row quarantined, the refusals in the window: %v", vs)
	}
	for _, s := range []float64{8.1, 8.5, 8.9, 9.3} { // past the 5 s bound after the restore
		h.Events = append(h.Events, Event{From: at(s), To: at(s), Kind: KindRouterExit, Note: exit})
	}
	broken(t, h, "no-restart-loop", "router 0 exited on its own 4 times")

	h = drifted()
	h.Events[0].From, h.Events[0].To = at(3.5), at(5) // row c (+2 s) was written before the drift
	broken(t, h, "published-or-quarantined", "valid row c")
	h = drifted()
	h.Quar[0].Reason = "headers is not a JSON object"
	broken(t, h, "published-or-quarantined", "valid row c")
	h = drifted()
	h.Quar = nil // neither delivered nor quarantined
	broken(t, h, "published-or-quarantined", "row c")
}
