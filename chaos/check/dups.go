package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// replays reports whether an event of kind k may publish again what was published before it, and how many
// rows at most: the docs name crashes, publish failures (every connection fault), a resumed snapshot and
// backfill; a graceful stop (SIGTERM) and a refused command replay nothing. The harness's consumer losing
// its channel is a cause too: what it had not acknowledged comes again.
func replays(h *History, e Event, committedBefore int) (bool, int) {
	stream := h.WindowRows + 2*h.MaxTxnRows + 200
	switch e.Kind {
	case gen.FaultTerm:
		// A SIGTERM during the initial snapshot publishes the page being read again (docs/snapshots.md).
		if h.Setup.SnapshotRows > 0 && !StreamedBefore(h, e.Router, e.From) {
			return true, h.Setup.SnapshotRows
		}
		return false, 0
	case gen.CmdResetLive, gen.CmdResetInFlight: // a refused reset replays nothing; its routers' stops are FaultTerm
		return false, 0
	case gen.CmdBackfill, gen.CmdGapBackfill, gen.FaultPGCrash, gen.FaultPGFast:
		// A backfill copies every row; after a crash the slot goes back to its last checkpoint.
		return true, committedBefore + stream
	}
	return true, stream + h.Setup.SnapshotRows
}

// StreamedBefore reports whether router logged that it streams (its initial snapshot done) before t.
func StreamedBefore(h *History, router int, t time.Time) bool {
	for _, l := range h.Logs {
		if l.Router == router && l.At.Before(t) && strings.Contains(l.Text, "msg=streaming") {
			return true
		}
	}
	return false
}

// streamedBetween reports whether router logged that it streams in [from, to).
func streamedBetween(h *History, router int, from, to time.Time) bool {
	for _, l := range h.Logs {
		if l.Router == router && !l.At.Before(from) && l.At.Before(to) && strings.Contains(l.Text, "msg=streaming") {
			return true
		}
	}
	return false
}

func checkDuplicates(h *History, _ Limits) []Violation {
	seen := map[string]bool{}
	var dups []Delivery
	for _, d := range h.Deliv {
		if seen[d.MessageID] {
			dups = append(dups, d)
		}
		seen[d.MessageID] = true
	}
	if len(dups) == 0 {
		return nil
	}
	committed := make([]time.Time, len(h.Rows))
	for i, r := range h.Rows {
		committed[i] = r.Committed
	}
	sort.Slice(committed, func(i, j int) bool { return committed[i].Before(committed[j]) })
	bound, causes := 0, 0
	var first time.Time
	for _, e := range h.Events {
		before := sort.Search(len(committed), func(i int) bool { return committed[i].After(e.To) })
		if ok, n := replays(h, e, before); ok {
			if causes == 0 || e.From.Before(first) {
				first = e.From
			}
			causes++
			bound += n
		}
	}
	for _, r := range h.Rows {
		// A nack is retried: the refused event reaches the accepting queues once per try, and the events
		// read before it (in its transaction, and up to the furthest one read) again
		// (docs/howto/broker-refusals-and-alarms.md#events-the-broker-refuses); with --refusal-retry 2s about 5 tries.
		if r.Refused {
			if causes == 0 || r.Committed.Before(first) {
				first = r.Committed
			}
			causes++
			bound += 6 * (h.WindowRows + 2*h.MaxTxnRows + 200)
		}
	}
	var vs []Violation
	if causes == 0 || dups[0].At.Before(first) {
		vs = append(vs, Violation{Detail: fmt.Sprintf("message %s (%s v%d) delivered again at +%.2fs with no fault or backfill before it",
			dups[0].MessageID, dups[0].Aggregate, dups[0].Version, dups[0].At.Sub(h.Start).Seconds()), Aggregate: dups[0].Aggregate, At: dups[0].At})
	}
	if len(dups) > bound && causes > 0 {
		vs = append(vs, Violation{Detail: fmt.Sprintf("%d duplicate deliveries, more than the %d that %d faults and backfills can replay", len(dups), bound, causes)})
	}
	return vs
}
