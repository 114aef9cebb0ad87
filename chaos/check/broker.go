package check

import (
	"fmt"
	"sort"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// checkBrokerOutages holds a broker restart, a memory alarm, a SIGKILL of the node, a queue-length policy or
// the routers' permissions revoked (on the harness's own node) to its length: the stall it causes ends
// with it. When rows were pending as it ended, and no other fault or command followed
// within the bound, a row is first delivered within the stall bound after its end. (While it lasts, the stall invariant asks /readyz to say 503 and a log line to
// name the cause once it is longer than the bound.)
func checkBrokerOutages(h *History, l Limits) []Violation {
	first := firstDeliveries(h)
	quar := quarantinedIDs(h)
	var firsts []time.Time
	for _, i := range first {
		firsts = append(firsts, h.Deliv[i].At)
	}
	sort.Slice(firsts, func(i, j int) bool { return firsts[i].Before(firsts[j]) })
	var vs []Violation
	for i, e := range h.Events {
		if !outage(e.Kind) || e.Note != "" {
			continue
		}
		if followed(h, i, l.Stall) {
			continue
		}
		pending := 0
		for _, r := range h.Rows {
			if r.Forged || quar[r.ID] || r.Committed.After(e.To) || Unpublishable(h, r) {
				continue
			}
			if i, ok := first[r.ID]; !ok || h.Deliv[i].At.After(e.To) {
				pending++
			}
		}
		if pending == 0 {
			continue
		}
		k := sort.Search(len(firsts), func(i int) bool { return firsts[i].After(e.To) })
		next := "never"
		if k < len(firsts) {
			if firsts[k].Sub(e.To) <= l.Stall {
				continue
			}
			next = fmt.Sprintf("%.1fs later", firsts[k].Sub(e.To).Seconds())
		}
		vs = append(vs, Violation{Detail: fmt.Sprintf("%s from +%.2fs to +%.2fs ended with %d rows pending; the next first delivery came %s (bound %v)",
			e.Kind, e.From.Sub(h.Start).Seconds(), e.To.Sub(h.Start).Seconds(), pending, next, l.Stall), At: e.To})
	}
	return vs
}

// outage reports whether k is a fault that stops every router's publishing while it lasts and no longer:
// those of the harness's own node, and the routers' PostgreSQL rights revoked.
func outage(k gen.Kind) bool {
	switch k {
	case gen.FaultBrokerRestart, gen.FaultMemAlarm, gen.FaultBrokerKill, gen.FaultPermissions, gen.FaultQueuePolicy, gen.FaultPGRights:
		return true
	}
	return false
}

// followed reports whether another fault or command began while event i lasted or within bound after it: the
// stall is then that one's too (a publication gap's refusal, a PostgreSQL restart).
func followed(h *History, i int, bound time.Duration) bool {
	e := h.Events[i]
	for j, o := range h.Events {
		switch o.Kind {
		case KindRouterExit, KindIntruderEmit, "consumer-lost":
			continue
		}
		if j != i && !o.From.Before(e.From) && !o.From.After(e.To.Add(bound)) {
			return true
		}
	}
	return false
}
