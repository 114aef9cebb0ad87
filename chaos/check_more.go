package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// checkStall finds each period longer than l.Stall in which a committed row was pending and no row was
// delivered for the first time. It is excused when every /readyz sample of the period said 503 (or did not
// answer) and a router logged a WARN or ERROR line in it: the router said it is stuck, and why.
func checkStall(h *History, l Limits) []Violation {
	first := firstDeliveries(h)
	quar := map[string]bool{}
	for _, q := range h.Quar {
		quar[q.EventID] = true
	}
	type pend struct{ committed, delivered time.Time }
	var ps []pend
	for _, r := range h.Rows {
		if quar[r.ID] || r.Deleted && slotless(h, r.Committed) {
			continue
		}
		p := pend{committed: r.Committed, delivered: h.End}
		if i, ok := first[r.ID]; ok {
			p.delivered = h.Deliv[i].At
		}
		ps = append(ps, p)
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
		if b.Sub(from) > l.Stall && !excused(h, from, b) {
			vs = append(vs, Violation{Detail: fmt.Sprintf("no progress for %.1fs (+%.2fs .. +%.2fs) with rows pending, while /readyz said %s",
				b.Sub(from).Seconds(), from.Sub(h.Start).Seconds(), b.Sub(h.Start).Seconds(), readyIn(h, from, b)), At: from})
		}
		if b.After(prev) {
			prev = b
		}
	}
	return compress(vs, 5)
}

func excused(h *History, from, to time.Time) bool {
	n := 0
	for _, s := range h.Ready {
		if s.At.Before(from) || s.At.After(to) {
			continue
		}
		n++
		if s.Code == 200 {
			return false
		}
	}
	if n == 0 {
		return false
	}
	for _, ln := range h.Logs {
		if ln.Router >= 0 && !ln.At.Before(from) && !ln.At.After(to) && (ln.Level == "WARN" || ln.Level == "ERROR") {
			return true
		}
	}
	return false
}

// readyIn summarizes the /readyz answers between from and to, e.g. "200 x12, 503 x3".
func readyIn(h *History, from, to time.Time) string {
	n := map[int]int{}
	for _, s := range h.Ready {
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

// replays reports whether an event of kind k may publish again what was published before it, and how many
// rows at most: the docs name crashes, publish failures (every connection fault), a resumed snapshot and
// backfill; a graceful stop (SIGTERM) and a refused command replay nothing. The harness's consumer losing
// its channel is a cause too: what it had not acknowledged comes again.
func replays(h *History, e Event, committedBefore int) (bool, int) {
	stream := h.WindowRows + 2*h.MaxTxnRows + 200
	switch e.Kind {
	case FaultTerm:
		// A SIGTERM during the initial snapshot publishes the page being read again (docs/snapshots.md).
		if h.Setup.SnapshotRows > 0 && !streamedBefore(h, e.Router, e.From) {
			return true, h.Setup.SnapshotRows
		}
		return false, 0
	case CmdResetLive:
		return false, 0
	case CmdBackfill, FaultPGCrash, FaultPGFast:
		// A backfill copies every row; after a crash the slot goes back to its last checkpoint.
		return true, committedBefore + stream
	}
	return true, stream + h.Setup.SnapshotRows
}

// streamedBefore reports whether router logged that it streams (its initial snapshot done) before t.
func streamedBefore(h *History, router int, t time.Time) bool {
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

func checkExits(h *History, l Limits) []Violation {
	n := map[int]int{}
	var vs []Violation
	for _, e := range h.Events {
		if e.Kind != KindRouterExit {
			continue
		}
		n[e.Router]++
		if n[e.Router] == l.RouterExits+1 {
			vs = append(vs, Violation{Detail: fmt.Sprintf("router %d exited on its own %d times (a restart loop); the last: %s", e.Router, n[e.Router], e.Note), At: e.From})
		}
	}
	return vs
}

// checkReset: a reset without --force run while its router was ready (streaming) must refuse; the runner
// records the outcome as "exit <code>: <last line>".
func checkReset(h *History, _ Limits) []Violation {
	var vs []Violation
	for _, e := range h.Events {
		if e.Kind == CmdResetLive && strings.HasPrefix(e.Note, "exit 0") {
			vs = append(vs, Violation{Detail: fmt.Sprintf("reset without --force at +%.2fs succeeded while router %d was ready: %s",
				e.From.Sub(h.Start).Seconds(), e.Router, e.Note), At: e.From})
		}
	}
	return vs
}

func checkLogs(h *History, l Limits) []Violation {
	var vs []Violation
	for _, ln := range h.Logs {
		if l.PayloadToken != "" && strings.Contains(ln.Text, l.PayloadToken) {
			vs = append(vs, Violation{Detail: "a log line carries a payload: " + trim(ln.Text, 200), At: ln.At})
		}
		if strings.Contains(ln.Text, "WARNING: DATA RACE") {
			vs = append(vs, Violation{Detail: "a router reported a data race", At: ln.At})
		}
	}
	return compress(vs, 3)
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
