package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// Two rules that a backfill's copies or a refusal's quarantine record could otherwise hide (issue 36,
// finding 6: a router without its per-aggregate hold, and one that skipped a transaction whose rows a
// publication gap's backfill then copied, passed every CI seed).

// checkRefusalHold holds the router to its per-aggregate hold (docs/howto/tune-throughput.md#hot-aggregates; ADR
// 0006): with --aggregate-window 1 no later event of an aggregate is written while one of its events is
// unconfirmed, so when the broker refuses an event (a nack, a return, a channel closed on it), no later
// version of its aggregate reaches the consumer from the stream before that event is settled: quarantined
// (its first quarantine record) or, for a valid row the broker refused for a while only, confirmed (its
// first delivery). A row the full queue refuses reaches the consumer's queue on every try (the consumer's
// queue accepts what the full queue nacks), so only its quarantine settles it. checkOrder cannot see this:
// it passes over an event quarantined before its first delivery.
func checkRefusalHold(h *History, _ Limits) []Violation {
	if h.Setup.AggregateWindow > 1 {
		return nil // the option trades this order away under a refusal (docs/howto/tune-throughput.md#hot-aggregates)
	}
	quarAt := map[string]time.Time{}
	reason := map[string]string{}
	for _, q := range h.Quar {
		if t, ok := quarAt[q.EventID]; !ok || q.At.Before(t) {
			quarAt[q.EventID], reason[q.EventID] = q.At, q.Reason
		}
	}
	streamed := firstStreamed(h)
	byAggregate := map[string][]Row{}
	for _, r := range h.Rows {
		byAggregate[routerAggregate(r)] = append(byAggregate[routerAggregate(r)], r)
	}
	var vs []Violation
	for _, r := range h.Rows {
		q, quarantined := quarAt[r.ID]
		if !quarantined || r.Poison || r.Forged || r.Emitted || !brokerRefusal(r, reason[r.ID]) ||
			slotless(h, r.Committed) || inPublicationGap(h, r.Committed) {
			continue // not the stream's refusal: a backfill's or a snapshot's, or no refusal at all
		}
		settled := q
		if d, ok := streamed[r.ID]; ok && !r.Refused && d.Before(settled) {
			settled = d // confirmed once, refused on a later try (a policy set meanwhile)
		}
		for _, s := range byAggregate[routerAggregate(r)] {
			if d, ok := streamed[s.ID]; ok && s.Version > r.Version && d.Before(settled) {
				vs = append(vs, Violation{Detail: fmt.Sprintf("aggregate %s: version %d first delivered at +%.2fs, before version %d, "+
					"which the broker refused, was settled (quarantined at +%.2fs): with --aggregate-window 1 no later version is "+
					"written while an earlier one is unconfirmed", r.Aggregate, s.Version, d.Sub(h.Start).Seconds(), r.Version,
					q.Sub(h.Start).Seconds()), Aggregate: r.Aggregate, At: d})
				break
			}
		}
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].At.Before(vs[j].At) })
	return compress(vs, 5)
}

// routerAggregate is the aggregate the router holds r's event under: Row.Aggregate names the writer's draw,
// which a mapped row (aggregate type "mapped"), a native one and an emitted one (type "order", the draw as
// its id) share, so that seed 1003's emitted "mapped/w0-4" v207 was taken for a later version of the mapped
// rows of w0-4 quarantined after it.
func routerAggregate(r Row) string {
	if r.Table == gen.MappedTable {
		return "mapped-table:" + r.Aggregate
	}
	return "order/" + strings.TrimPrefix(r.Aggregate, "order/")
}

// brokerRefusal reports whether r's quarantine record (with reason) is the broker's refusal of its event:
// a row the harness routes to the full queue or makes too big, or a valid row nacked or returned (a
// queue-length policy, a per-topic exchange unbound or deleted).
func brokerRefusal(r Row, reason string) bool {
	return r.Refused || strings.Contains(reason, "nacked by the broker") || strings.Contains(reason, "returned by the broker") ||
		strings.Contains(reason, "does not exist")
}

// firstStreamed maps each message id to the time of its first delivery that is neither a snapshot's or
// backfill's copy (x-backfill) nor a quarantine replay's.
func firstStreamed(h *History) map[string]time.Time {
	m := map[string]time.Time{}
	for _, d := range h.Deliv {
		if _, ok := m[d.MessageID]; !ok && !d.Backfill && !d.Replayed {
			m[d.MessageID] = d.At
		}
	}
	return m
}

// gapSlack widens a publication gap (FaultPubGap, from the DROP TABLE to the ADD TABLE) for NeedsStream: a
// transaction committed just before the drop or just after the add may be decoded either way.
const gapSlack = time.Second

// inPublicationGap reports whether t falls in a publication gap, widened by gapSlack on both sides.
func inPublicationGap(h *History, t time.Time) bool {
	for _, e := range h.Events {
		if e.Kind == gen.FaultPubGap && !t.Before(e.From.Add(-gapSlack)) && !t.After(e.To.Add(gapSlack)) {
			return true
		}
	}
	return false
}

// NeedsStream reports whether r must reach the consumer from the stream itself, a backfill's or a
// snapshot's copy (x-backfill) not standing in for it: r committed while every router had its slot and
// its table was in the publication, and it was never quarantined (whose record a replay publishes).
func NeedsStream(h *History, r Row, quarantined bool) bool {
	return !quarantined && !r.Forged && !r.Poison && !r.Refused && !slotless(h, r.Committed) && !inPublicationGap(h, r.Committed)
}

// checkStreamed holds the stream to every row it had to read: a row NeedsStream that reached the consumer
// only as a backfill's copy was skipped by the stream (the row was in its slot and in its publication) and
// only found again by an operator's backfill, which invariant 1 alone would count as its publication.
func checkStreamed(h *History, _ Limits) []Violation {
	quar := map[string]bool{}
	for _, q := range h.Quar {
		quar[q.EventID] = true
	}
	copied := map[string]time.Time{}
	for _, d := range h.Deliv {
		if _, ok := copied[d.MessageID]; !ok && d.Backfill && !d.Replayed {
			copied[d.MessageID] = d.At
		}
	}
	streamed := firstStreamed(h)
	var vs []Violation
	for _, r := range h.Rows {
		c, ok := copied[r.ID]
		if _, s := streamed[r.ID]; !ok || s || !NeedsStream(h, r, quar[r.ID]) {
			continue
		}
		vs = append(vs, Violation{Detail: fmt.Sprintf("row %s (%s v%d, committed at +%.2fs while its slot existed and its table was in the "+
			"publication) reached the consumer only as a backfill's copy (+%.2fs), never from the stream", r.ID, r.Aggregate,
			r.Version, r.Committed.Sub(h.Start).Seconds(), c.Sub(h.Start).Seconds()), Aggregate: r.Aggregate, At: r.Committed})
	}
	sort.Slice(vs, func(i, j int) bool { return vs[i].At.Before(vs[j].At) })
	return compress(vs, 10)
}
