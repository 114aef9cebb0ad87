package check

import (
	"testing"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// streaming is clean() with its router streaming from before the first commit: every row was in a slot.
func streaming() *History {
	h := clean()
	h.Logs = []LogLine{{At: at(-0.5), Router: 0, Level: "INFO", Text: "level=INFO msg=streaming slot=s"}}
	return h
}

// TestRefusalHoldsItsAggregate: v2 is refused by the full queue (the consumer's queue gets a copy on each
// try) and quarantined at +1.5 s; with --aggregate-window 1, v3 may reach the consumer only after that
// record. The mutant without the hold (issue 36) delivered v3 with v2's first copy: checkOrder saw v2, v3 in
// order, and invariant 1 a refused row quarantined.
func TestRefusalHoldsItsAggregate(t *testing.T) {
	refused := func(v3At float64) *History {
		h := streaming()
		h.Rows[1].Refused = true
		h.Quar = []Quarantined{{ID: 1, EventID: "b", Reason: "nacked by the broker (a queue bound to exchange \"x\" refused it …) (retried 4 times over 2s)", At: at(1.5)}}
		h.Deliv[2].At = at(v3At)
		h.Deliv = append(h.Deliv, Delivery{At: at(1.3), MessageID: "b", Aggregate: "order/1", Version: 2}) // a try's copy
		sortDeliveries(h)
		return h
	}
	if vs := Check(refused(2.1), limits); len(vs) != 0 {
		t.Fatalf("v3 after v2's quarantine: %v", vs)
	}
	h := refused(1.2) // v3 written beside v2: before its record
	if vs := Check(h, limits); len(violated(h, "order-per-aggregate")) != 0 || len(violated(h, "published-or-quarantined")) != 0 {
		t.Fatalf("the older rules were to pass this history: %v", vs)
	}
	broken(t, h, "refusal-holds-its-aggregate", "version 3 first delivered at +1.20s, before version 2")
	h.Setup.AggregateWindow = 4 // the option trades the order away under a refusal
	if vs := violated(h, "refusal-holds-its-aggregate"); len(vs) != 0 {
		t.Fatalf("with --aggregate-window 4: %v", vs)
	}
	// An emitted event drawn from the same writer's aggregate as mapped rows is another aggregate to the
	// router (type "order", the draw as its id): seeds 1003 and 1548.
	h = refused(1.2)
	h.Rows[1].Table = gen.MappedTable
	if vs := violated(h, "refusal-holds-its-aggregate"); len(vs) != 0 {
		t.Fatalf("a mapped row refused, a native row of the same draw after it: %v", vs)
	}
	// A row committed in a publication gap is the gap's backfill's to publish, and to quarantine.
	h = refused(1.2)
	h.Events = []Event{{From: at(0.8), To: at(1.1), Kind: gen.FaultPubGap}}
	if vs := violated(h, "refusal-holds-its-aggregate"); len(vs) != 0 {
		t.Fatalf("a refused row of a publication gap: %v", vs)
	}

	// A valid row a queue-length policy nacked: settled by its quarantine, or by its first delivery when an
	// earlier try was confirmed (the policy set after it, the stream then reading it again).
	h = streaming()
	h.Quar = []Quarantined{{ID: 1, EventID: "b", Reason: "nacked by the broker (a queue bound to exchange \"x\" refused it …) (retried 4 times over 2s)", At: at(1.5)}}
	h.Deliv = []Delivery{h.Deliv[0], {At: at(1.2), MessageID: "c", Aggregate: "order/1", Version: 3}}
	broken(t, h, "refusal-holds-its-aggregate", "version 3 first delivered at +1.20s, before version 2")
	h.Deliv = []Delivery{h.Deliv[0], {At: at(1.1), MessageID: "b", Aggregate: "order/1", Version: 2}, h.Deliv[1]}
	if vs := violated(h, "refusal-holds-its-aggregate"); len(vs) != 0 {
		t.Fatalf("v2 confirmed before v3, quarantined on a later try: %v", vs)
	}
}

// TestStreamedNotOnlyCopied: a row committed while its slot existed and its table was in the publication
// must come from the stream; a backfill's copy alone means the stream skipped it (the mutant that resumed
// one transaction past the slot survived a seed whose backfill copied what it skipped). A row of a
// publication gap, or of the time before any slot (the initial snapshot's), may arrive as a copy alone.
func TestStreamedNotOnlyCopied(t *testing.T) {
	copied := func() *History {
		h := streaming()
		h.Events = []Event{{From: at(4), To: at(5), Kind: gen.CmdBackfill, Note: "exit 0"}}
		h.Deliv = append(h.Deliv[:2], Delivery{At: at(4.2), MessageID: "c", Aggregate: "order/1", Version: 3, Backfill: true, CommitLSN: "0/50"})
		return h
	}
	h := copied()
	if vs := violated(h, "published-or-quarantined"); len(vs) != 0 {
		t.Fatalf("invariant 1 was to count the copy: %v", vs)
	}
	broken(t, h, "streamed-not-only-copied", "row c (order/1 v3, committed at +2.00s")
	h.Deliv = append(h.Deliv, Delivery{At: at(4.5), MessageID: "c", Aggregate: "order/1", Version: 3})
	if vs := violated(h, "streamed-not-only-copied"); len(vs) != 0 {
		t.Fatalf("the stream delivered it after the copy: %v", vs)
	}
	h = copied()
	h.Events = append(h.Events, Event{From: at(1.6), To: at(2.3), Kind: gen.FaultPubGap})
	if vs := violated(h, "streamed-not-only-copied"); len(vs) != 0 {
		t.Fatalf("a row of a publication gap: %v", vs)
	}
	h = copied()
	h.Logs[0].At = at(3) // no slot before +3 s: the initial snapshot's copy is the row's publication
	if vs := violated(h, "streamed-not-only-copied"); len(vs) != 0 {
		t.Fatalf("a row committed before the slot: %v", vs)
	}
}

// sortDeliveries puts h.Deliv in time order, as the recorder has them.
func sortDeliveries(h *History) {
	for i := 1; i < len(h.Deliv); i++ {
		for j := i; j > 0 && h.Deliv[j].At.Before(h.Deliv[j-1].At); j-- {
			h.Deliv[j], h.Deliv[j-1] = h.Deliv[j-1], h.Deliv[j]
		}
	}
}
