package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// Coverage is what a run exercised: features of its setup, operations that committed, faults and
// commands applied, and what the routers did on their own.
func Coverage(h *History) map[string]int {
	s := h.Setup
	c := map[string]int{
		fmt.Sprintf("feature:tables=%d", len(s.Tables)): 1,
		"feature:queue=" + s.QueueType:                  1,
		"feature:unroutable=" + s.UnroutableType:        1,
	}
	if s.Shards > 0 {
		c[fmt.Sprintf("feature:shards=%d", s.Shards)] = 1
	}
	if s.SnapshotRows > 0 {
		c["feature:initial-snapshot"] = 1
	}
	if s.FullQueue {
		c["feature:full-queue"] = 1
	}
	if s.Emit {
		c["feature:emit"] = 1
	}
	if s.OwnBroker {
		c["feature:own-broker"] = 1
	}
	if s.Partitioned {
		c["feature:partitioned"] = 1
	}
	if s.Mapped {
		c["feature:mapped"] = 1
	}
	if s.Keyless {
		c["feature:mapped-keyless"] = 1
	}
	if s.ExchangeByTopic {
		c["feature:exchange-by-topic"] = 1
	}
	if s.AggregateWindow > 1 {
		c["feature:aggregate-window"] = 1
	}
	if s.OnDriftQuarantine {
		c["feature:on-drift-quarantine"] = 1
	}
	for _, q := range h.Quar {
		if driftReason(q.Reason) {
			c["seen:drift-quarantined"]++
		}
	}
	if s.Standby {
		c["feature:standby"] = 1
		c["seen:takeovers"] += len(Takeovers(h))
		if n := overlaps(h); n > 0 {
			c["seen:two-active-in-one-sample"] = n
		}
	}
	for _, r := range h.Rows {
		if r.Partition > 0 {
			c["seen:rows-in-own-partitions"]++
		}
	}
	for _, l := range h.Logs {
		if l.Router >= 0 && strings.Contains(l.Text, "RabbitMQ blocked the connection") {
			c["seen:broker-blocked"]++
		}
		if l.Router >= 0 && strings.Contains(l.Text, "nacked by the broker") {
			c["seen:nack-logged"]++
			for _, e := range h.Events {
				if e.Kind == gen.FaultQueuePolicy && !l.At.Before(e.From) && !l.At.After(e.To.Add(policySlack)) {
					c["seen:nack-logged-under-policy"]++
					break
				}
			}
		}
		if l.Router >= 0 && strings.Contains(l.Text, "returned by the broker") {
			c["seen:return-logged"]++ // a return of the router's: an exchange unbound (issue 36 wants two CI seeds with one)
		}
		if l.Router >= 0 && l.Level == "ERROR" && driftExitText(l.Text) {
			c["seen:drift-refused"]++
		}
		if l.Router >= 0 && strings.Contains(l.Text, "ACCESS_REFUSED") {
			c["seen:access-refused-logged"]++
		}
	}
	txns := map[string]bool{}
	for _, r := range h.Rows {
		writer, _, _ := strings.Cut(r.Aggregate, "-") // the writer's prefix, w<n>; the whole name when it has none
		key := fmt.Sprintf("%s/%d/%s", r.Op, r.Txn, writer)
		if !txns[key] {
			txns[key] = true
			c["op:"+string(r.Op)]++
		}
	}
	for _, e := range h.Events {
		if e.Kind == KindIntruderEmit {
			c["op:"+string(e.Kind)]++ // an operation of the intruder role, not a fault
			continue
		}
		c["fault:"+string(e.Kind)]++
	}
	for _, d := range h.Deliv {
		if d.Backfill {
			c["seen:backfill-copies"]++
		}
		if d.Replayed {
			c["seen:replayed-delivered"]++
		}
	}
	c["seen:quarantined"] += len(h.Quar)
	for k, n := range inboxCoverage(h) {
		c[k] += n
	}
	pauseCoverage(h, c)
	hotCoverage(h, c)
	delivered := map[string]bool{}
	for _, d := range h.Deliv {
		delivered[d.MessageID] = true
	}
	for _, r := range h.Rows {
		if r.Emitted && delivered[r.ID] {
			c["seen:emitted-delivered"]++
		}
	}
	for _, q := range h.Quar {
		if strings.Contains(q.Reason, unauthenticated) {
			c["seen:unauthenticated-quarantined"]++
		}
	}
	quar := map[string]Quarantined{}
	for _, q := range h.Quar {
		quar[q.EventID] = q
	}
	for _, r := range h.Rows {
		q, ok := quar[r.ID]
		reason := q.Reason
		switch {
		case ok && r.TooBig && strings.Contains(reason, "406"):
			c["seen:too-big-quarantined"]++
		case ok && r.Op == gen.OpInternal && strings.Contains(reason, "403"):
			c["seen:internal-exchange-quarantined"]++
		case ok && r.Refused && strings.Contains(reason, "nack"):
			c["seen:nacked-and-quarantined"]++
		case ok && !r.Poison && policyRefusal(h, r.ID, reason, q.At):
			c["seen:policy-nacked-quarantined"]++
		case ok && r.Table == gen.MappedTable && strings.Contains(reason, "does not exist"):
			c["seen:exchange-missing-quarantined"]++
		case ok && r.Table == gen.MappedTable && strings.Contains(reason, "312 NO_ROUTE"):
			c["seen:returned-quarantined"]++
		}
		if r.Table == gen.MappedTable && delivered[r.ID] {
			c["seen:mapped-delivered"]++
		}
	}
	return c
}

// Applied lists the faults and commands as applied, in the order they began, with their outcomes.
func Applied(h *History) string {
	var b strings.Builder
	fmt.Fprintf(&b, "faults and commands:\n")
	events := append([]Event(nil), h.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].From.Before(events[j].From) })
	for _, e := range events {
		who := ""
		switch e.Kind {
		case gen.FaultKill, gen.FaultTerm, gen.CmdResetLive, KindRouterExit:
			who = fmt.Sprintf(" router=%d", e.Router)
		}
		fmt.Fprintf(&b, "  +%6.2fs..+%6.2fs %s%s %s%s\n", e.From.Sub(h.Start).Seconds(), e.To.Sub(h.Start).Seconds(),
			e.Kind, who, Trim(e.Note, 300), nextActive(h, e))
	}
	if h.Setup.Standby {
		var ts []string
		for _, d := range Takeovers(h) {
			ts = append(ts, fmt.Sprintf("%.2fs", d.Seconds()))
		}
		fmt.Fprintf(&b, "takeovers (the active process changed; from its last active sample to the new one's first, an outage between included): %d %s\n", len(ts), strings.Join(ts, " "))
	}
	return b.String()
}

// Shorten is the part of h a reader of a failure needs: the faults and commands with their outcomes, the
// rows and deliveries of each aggregate a violation names, and the routers' last warnings.
func Shorten(h *History, vs []Violation) string {
	var b strings.Builder
	b.WriteString(Applied(h))
	done := map[string]bool{}
	for _, v := range vs {
		if v.Aggregate == "" || done[v.Aggregate] {
			continue
		}
		done[v.Aggregate] = true
		// Around the violation: the rows committed in the 10 s before it, the deliveries from 3 s before
		// to 1 s after (everything, for a violation without a moment).
		from, to := h.Start.Add(-time.Hour), h.End
		if !v.At.IsZero() {
			from, to = v.At.Add(-3*time.Second), v.At.Add(time.Second)
		}
		fmt.Fprintf(&b, "aggregate %s, rows committed from +%.2fs (version id op txn committed):\n", v.Aggregate, from.Add(-7*time.Second).Sub(h.Start).Seconds())
		n := 0
		for _, r := range h.Rows {
			if r.Aggregate == v.Aggregate && r.Committed.After(from.Add(-7*time.Second)) && r.Committed.Before(to) && n < 40 {
				n++
				fmt.Fprintf(&b, "  v%d %s %s txn=%d +%.2fs unknown=%v deleted=%v\n", r.Version, r.ID, r.Op, r.Txn,
					r.Committed.Sub(h.Start).Seconds(), r.Unknown, r.Deleted)
			}
		}
		fmt.Fprintf(&b, "deliveries of %s from +%.2fs to +%.2fs (version at backfill redelivered):\n", v.Aggregate,
			from.Sub(h.Start).Seconds(), to.Sub(h.Start).Seconds())
		n = 0
		for _, d := range h.Deliv {
			if d.Aggregate == v.Aggregate && !d.At.Before(from) && !d.At.After(to) && n < 60 {
				n++
				fmt.Fprintf(&b, "  v%d +%.3fs backfill=%v redelivered=%v\n", d.Version, d.At.Sub(h.Start).Seconds(), d.Backfill, d.Redelivered)
			}
		}
	}
	var warn []string
	for _, l := range h.Logs {
		// A quarantined row is expected (the poison rows); the warnings that matter are the others.
		if (l.Level == "WARN" || l.Level == "ERROR") && !strings.Contains(l.Text, `msg="row quarantined"`) {
			who := fmt.Sprint(l.Router)
			if h.Setup.Standby && l.Router >= 0 {
				who += fmt.Sprintf(" proc %d", l.Proc)
			}
			warn = append(warn, fmt.Sprintf("  router %s +%.2fs %s", who, l.At.Sub(h.Start).Seconds(), Trim(l.Text, 400)))
		}
	}
	if len(warn) > 15 {
		warn = warn[len(warn)-15:]
	}
	fmt.Fprintf(&b, "last warnings and errors of the routers:\n%s\n", strings.Join(warn, "\n"))
	return b.String()
}
