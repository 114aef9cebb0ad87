package check

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// checkStall finds each period longer than l.Stall in which a committed row was pending and no row was
// delivered for the first time, by the stream or at all (a row a copy delivered first is pending for the
// stream until it delivers it too), nor for the second time by the stream (its catch-up after a fault). It is excused when every /readyz sample of the period said 503 (or did not
// answer) and a router logged a WARN or ERROR line in it: the router said it is stuck, and why. With a
// standby, the slot's samples are its /readyz?active=1 answers (slotSamples), and a period in which no
// router was active past the takeover bound without an outage (checkActive) is never excused.
func checkStall(h *History, l Limits) []Violation {
	first := firstDeliveries(h)
	stream := map[string]int{} // each row's first delivery by the stream (not a copy, not a replay)
	again := map[string]int{}  // and its second, the stream publishing it again after a fault
	for i, d := range h.Deliv {
		if d.Backfill || d.Replayed {
			continue
		}
		if _, ok := stream[d.MessageID]; !ok {
			stream[d.MessageID] = i
		} else if _, ok := again[d.MessageID]; !ok {
			again[d.MessageID] = i
		}
	}
	quar := quarantinedIDs(h)
	type pend struct{ committed, delivered time.Time }
	var ps []pend
	for _, r := range h.Rows {
		if quar[r.ID] || r.Forged || Unpublishable(h, r) {
			continue
		}
		p := pend{committed: r.Committed, delivered: h.End}
		if i, ok := first[r.ID]; ok {
			p.delivered = h.Deliv[i].At
		}
		ps = append(ps, p)
		// A row a backfill or snapshot copied first still waits in the slot: the stream's own first
		// delivery of it later is progress too, pending since the copy (seed 5022: the rest of a huge
		// transaction the backfill had copied took the stream 25 s to publish again, behind which the
		// rows nobody had delivered waited, with /readyz rightly 200).
		if i, ok := first[r.ID]; ok && h.Deliv[i].Backfill {
			if j, ok := stream[r.ID]; ok && j > i {
				ps = append(ps, pend{committed: h.Deliv[i].At, delivered: h.Deliv[j].At})
			}
		}
		// The stream publishing again, once, what it published before a restart or a takeover is the work
		// it must do before the rows behind it (the duplicates the docs allow after a fault), not a stall:
		// progress, but nothing pending (seed 8035: a takeover under another --on-drift could not use the
		// other router's mark and published a 25,098-event transaction again, 25 s, with /readyz rightly
		// 200). A third delivery is no progress: a stream going round in circles stalls.
		if j, ok := again[r.ID]; ok {
			ps = append(ps, pend{committed: h.Deliv[j].At, delivered: h.Deliv[j].At})
		}
	}
	sort.Slice(ps, func(i, j int) bool { return ps[i].delivered.Before(ps[j].delivered) })
	// minCommit[i]: the earliest commit among the rows delivered at or after ps[i].
	minCommit := make([]time.Time, len(ps))
	for i := len(ps) - 1; i >= 0; i-- {
		minCommit[i] = ps[i].committed
		if i+1 < len(ps) && minCommit[i+1].Before(minCommit[i]) {
			minCommit[i] = minCommit[i+1]
		}
	}
	var vs []Violation
	prev := h.Start
	for i := 0; i < len(ps); i++ {
		b := ps[i].delivered
		from := prev
		if minCommit[i].After(from) {
			from = minCommit[i]
		}
		if b.Sub(from) > l.Stall && (!excused(h, from, b, l.Stall) || noActiveIn(h, from, b, takeoverBound(l))) {
			vs = append(vs, Violation{Detail: fmt.Sprintf("no progress for %.1fs (+%.2fs .. +%.2fs) with rows pending, while /readyz said %s",
				b.Sub(from).Seconds(), from.Sub(h.Start).Seconds(), b.Sub(h.Start).Seconds(), readyIn(h, from, b)), At: from})
		}
		if b.After(prev) {
			prev = b
		}
	}
	return compress(vs, 5)
}

// excused reports whether a period without progress was visible: /readyz answered, and never said 200 for
// longer than the stall bound in a row (a router needs some time to see that a server stopped answering:
// a silent PostgreSQL is detected within --pg-timeout, so it turns unready within the bound), and a router
// logged a warning or an error in it or as it began (stallLead; one naming a right its user lost only within that revocation's
// window and the bound after it: refusalExplains).
func excused(h *History, from, to time.Time, bound time.Duration) bool {
	n := 0
	var ready time.Time // the first of the current run of 200s; zero outside one
	for _, s := range slotSamples(h) {
		if s.At.Before(from) || s.At.After(to) {
			continue
		}
		n++
		switch {
		case s.Code != 200:
			ready = time.Time{}
		case ready.IsZero():
			ready = s.At
		case s.At.Sub(ready) > bound:
			return false
		}
	}
	if n == 0 {
		return false
	}
	for _, ln := range h.Logs {
		if ln.Router >= 0 && !ln.At.Before(from.Add(-stallLead)) && !ln.At.After(to) && (ln.Level == "WARN" || ln.Level == "ERROR") &&
			refusalExplains(h, ln.Text, ln.At, to, bound) {
			return true
		}
	}
	return false
}

// stallLead is how long before a stall's start a line naming its cause may come: the router logs the
// cause (RabbitMQ blocked the connection) as the stall begins, which may be a moment before the first row
// that then waits committed (seed 284: 5 ms).
const stallLead = 500 * time.Millisecond

// readyIn summarizes the /readyz answers between from and to, e.g. "200 x12, 503 x3".
func readyIn(h *History, from, to time.Time) string {
	n := map[int]int{}
	for _, s := range slotSamples(h) {
		if !s.At.Before(from) && !s.At.After(to) {
			n[s.Code]++
		}
	}
	var parts []string
	for code, c := range n {
		parts = append(parts, fmt.Sprintf("%d x%d", code, c))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// quarantinedIDs is the set of event ids the history's quarantine records name.
func quarantinedIDs(h *History) map[string]bool {
	quar := map[string]bool{}
	for _, q := range h.Quar {
		quar[q.EventID] = true
	}
	return quar
}
