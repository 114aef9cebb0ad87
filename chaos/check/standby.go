package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// With Setup.Standby each slot runs two router processes, and /readyz?active=1 says which holds the slot:
// 200 from the active one, 503 from the standby (docs/howto/run-two-routers.md#the-standbys-check-of-rabbitmq).

const (
	defaultTakeover = 5 * time.Second
	// outageRecovery is how long after an outage ends a slot may still have no active router: the routers'
	// restart backoff and their reconnection.
	outageRecovery = 15 * time.Second
)

func takeoverBound(l Limits) time.Duration {
	if l.Takeover > 0 {
		return l.Takeover
	}
	return defaultTakeover
}

// round is one tick of the sampler for one slot: which processes answered /readyz?active=1 with 200.
type round struct {
	at     time.Time
	router int
	active []int
	code   int // 200 when a process is active; else the best other answer of /readyz?active=1 (0: none)
}

// rounds groups h.Ready by tick and slot, in time order.
func rounds(h *History) []round {
	type key struct{ round, router int }
	byKey := map[key]*round{}
	var keys []key
	for _, s := range h.Ready {
		k := key{s.Round, s.Router}
		r := byKey[k]
		if r == nil {
			r = &round{at: s.At, router: s.Router}
			byKey[k] = r
			keys = append(keys, k)
		}
		if s.Active == 200 {
			r.active = append(r.active, s.Proc)
			r.code = 200
		} else if r.code != 200 {
			r.code = max(r.code, s.Active)
		}
	}
	out := make([]round, 0, len(keys))
	for _, k := range keys {
		out = append(out, *byKey[k])
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// slotSamples are the /readyz samples the stall rule reads: h.Ready, or with a standby one per slot and
// tick, 200 when a process answered /readyz?active=1 with 200 (a standby's /readyz says 200 while it
// only waits, which tells nothing of the stream).
func slotSamples(h *History) []Sample {
	if !h.Setup.Standby {
		return h.Ready
	}
	var out []Sample
	for _, r := range rounds(h) {
		out = append(out, Sample{At: r.at, Router: r.router, Code: r.code})
	}
	return out
}

// takeoverKinds are the faults that take the active router away and leave the slot to the standby (or to
// the router itself, reconnected): only the old router's drain (a SIGTERM's, until Event.Gone) explains a
// slot without an active router.
var takeoverKinds = map[gen.Kind]bool{gen.FaultKill: true, gen.FaultTerm: true, gen.FaultPGCutActive: true, KindRouterExit: true}

// noOutage are the kinds that leave the routers able to hold their slot.
var noOutage = map[gen.Kind]bool{gen.CmdBackfill: true, gen.CmdReplay: true, gen.CmdResetLive: true, gen.FaultColumn: true,
	gen.FaultPartAttach: true, gen.FaultPartDetach: true, gen.FaultPartDrop: true, KindIntruderEmit: true}

// window is a period in which a slot may have no active router.
type window struct{ from, to time.Time }

// outages are the periods in which a slot may have no active router: the end's stop; a SIGTERMed router's
// drain (until Event.Gone); an outage (a PostgreSQL or broker fault, an AMQP cut or pause, a publication
// gap, an exchange taken away, a reset with the routers stopped, a gap refusal, any kind not in noOutage
// or takeoverKinds) while it lasts and outageRecovery after; and a row the broker refuses, from its commit
// to outageRecovery after its quarantine (the router restarts at each refusal for --refusal-retry, and a
// new active router starts that retry again).
func outages(h *History) []window {
	var ws []window
	if !h.Stopping.IsZero() {
		ws = append(ws, window{h.Stopping, h.End.Add(time.Hour)})
	}
	for _, e := range h.Events {
		switch {
		case e.Kind == KindRouterExit && gapRefusal(e.Note):
			ws = append(ws, window{e.From, e.To.Add(outageRecovery)})
		case takeoverKinds[e.Kind]:
			if !e.Gone.IsZero() {
				ws = append(ws, window{e.From, e.Gone})
			}
		case noOutage[e.Kind]:
		default:
			ws = append(ws, window{e.From, e.To.Add(outageRecovery)})
		}
	}
	quarAt := map[string]time.Time{}
	for _, q := range h.Quar {
		if at, ok := quarAt[q.EventID]; !ok || q.At.Before(at) {
			quarAt[q.EventID] = q.At
		}
	}
	for _, r := range h.Rows {
		if r.Refused {
			to, ok := quarAt[r.ID]
			if !ok {
				to = h.End
			}
			ws = append(ws, window{r.Committed, to.Add(outageRecovery)})
		}
	}
	return ws
}

func within(ws []window, t time.Time) bool {
	for _, w := range ws {
		if !t.Before(w.from) && !t.After(w.to) {
			return true
		}
	}
	return false
}

// gap is a period in which no process of a slot answered /readyz?active=1 with 200 and no outage
// explains it.
type gap struct {
	router   int
	from, to time.Time
}

// activeGaps are the periods longer than bound, from a slot's first active router on, in which it had none
// and no outage explains it.
func activeGaps(h *History, bound time.Duration) []gap {
	var gaps []gap
	started := map[int]bool{}
	open := map[int]time.Time{}
	end := func(router int, at time.Time) {
		if from, ok := open[router]; ok {
			if at.Sub(from) > bound {
				gaps = append(gaps, gap{router, from, at})
			}
			delete(open, router)
		}
	}
	ws := outages(h)
	var last time.Time
	for _, r := range rounds(h) {
		last = r.at
		if len(r.active) > 0 {
			started[r.router] = true
		}
		if !started[r.router] {
			continue
		}
		if len(r.active) == 0 && !within(ws, r.at) {
			if _, ok := open[r.router]; !ok {
				open[r.router] = r.at
			}
			continue
		}
		end(r.router, r.at)
	}
	for router := range open {
		end(router, last)
	}
	sort.Slice(gaps, func(i, j int) bool { return gaps[i].from.Before(gaps[j].from) })
	return gaps
}

// leaseMargin is the time between a router that lost the slot's lock during the initial snapshot stopping
// at the latest and the router that took the lock starting to copy at the earliest
// (docs/howto/run-two-routers.md#during-the-initial-snapshot: the lease and its margin; replication's lockMargin).
const leaseMargin = 250 * time.Millisecond

// checkActive holds a slot with a standby to one active router at a time: never two processes answering
// /readyz?active=1 with 200 in state snapshot within leaseMargin (copying, see copyingAtOnce), never two
// answering it with 200 in two ticks of the sampler in a row (a split brain; while the slot streams, one
// tick may catch the old router not yet aware that it lost its session), and never none for longer than
// the takeover bound unless an outage explains it (outages).
func checkActive(h *History, l Limits) []Violation {
	if !h.Setup.Standby {
		return nil
	}
	vs := copyingAtOnce(h)
	both := map[int]int{}
	reported := map[int]bool{}
	for _, r := range rounds(h) {
		if len(r.active) < 2 {
			both[r.router] = 0
			continue
		}
		both[r.router]++
		if both[r.router] == 2 && !reported[r.router] {
			reported[r.router] = true
			vs = append(vs, Violation{Detail: fmt.Sprintf("split brain: router %d's processes %v both answered /readyz?active=1 with 200 in two samples in a row (at +%.2fs)",
				r.router, r.active, r.at.Sub(h.Start).Seconds()), At: r.at})
		}
	}
	bound := takeoverBound(l)
	for _, g := range activeGaps(h, bound) {
		vs = append(vs, Violation{Detail: fmt.Sprintf("router %d had no active process for %.1fs (+%.2fs .. +%.2fs; /readyz?active=1 503 on both) after %s, past the takeover bound %v",
			g.router, g.to.Sub(g.from).Seconds(), g.from.Sub(h.Start).Seconds(), g.to.Sub(h.Start).Seconds(), lastEventBefore(h, g.from), bound), At: g.from})
	}
	return compress(vs, 5)
}

// copyingAtOnce finds the ticks in which two processes of a slot answered /readyz?active=1 with 200 in
// state snapshot (copying the initial snapshot) within leaseMargin of each other: from the first's question
// to the second's answer, so that each read its state less than the margin apart. The docs promise that
// never happens, one tick is enough. Histories recorded without the state (Sample.ActiveAt zero) are judged
// by the two-ticks rule alone.
func copyingAtOnce(h *History) []Violation {
	type key struct{ round, router int }
	copying := map[key][]Sample{}
	var keys []key
	for _, s := range h.Ready {
		if s.Active != 200 || s.State != "snapshot" || s.ActiveAt.IsZero() {
			continue
		}
		k := key{s.Round, s.Router}
		if copying[k] == nil {
			keys = append(keys, k)
		}
		copying[k] = append(copying[k], s)
	}
	var vs []Violation
	reported := map[int]bool{}
	for _, k := range keys {
		ss := copying[k]
		if len(ss) < 2 || reported[k.router] {
			continue
		}
		from, to := ss[0].At, ss[0].ActiveAt
		var procs []int
		for _, s := range ss {
			if s.At.Before(from) {
				from = s.At
			}
			if s.ActiveAt.After(to) {
				to = s.ActiveAt
			}
			procs = append(procs, s.Proc)
		}
		if to.Sub(from) >= leaseMargin {
			continue
		}
		reported[k.router] = true
		vs = append(vs, Violation{Detail: fmt.Sprintf("split brain: router %d's processes %v both copied the initial snapshot "+
			"(/readyz?active=1 200 in state snapshot) within %v of each other (at +%.2fs), which the slot lock's lease rules out",
			k.router, procs, to.Sub(from).Round(time.Millisecond), from.Sub(h.Start).Seconds()), At: from})
	}
	return vs
}

// noActiveIn reports whether a gap longer than bound without an active router (activeGaps) overlaps
// from..to: a stall in it is never excused by the routers' 503s.
func noActiveIn(h *History, from, to time.Time, bound time.Duration) bool {
	if !h.Setup.Standby {
		return false
	}
	for _, g := range activeGaps(h, bound) {
		if g.from.Before(to) && g.to.After(from) {
			return true
		}
	}
	return false
}

// lastEventBefore names the last fault or command that began before t, e.g. "router-sigkill at +3.20s".
func lastEventBefore(h *History, t time.Time) string {
	var last *Event
	for i, e := range h.Events {
		if !e.From.After(t) && (last == nil || e.From.After(last.From)) {
			last = &h.Events[i]
		}
	}
	if last == nil {
		return "no fault"
	}
	return fmt.Sprintf("%s at +%.2fs", last.Kind, last.From.Sub(h.Start).Seconds())
}

// Takeovers are the times a slot's active router changed, each from the last tick its old process was
// active to the first its new one was.
func Takeovers(h *History) []time.Duration {
	var out []time.Duration
	cur := map[int]int{}
	since := map[int]time.Time{}
	for _, r := range rounds(h) {
		if len(r.active) != 1 {
			continue
		}
		p := r.active[0]
		if old, ok := cur[r.router]; ok && old != p {
			out = append(out, r.at.Sub(since[r.router]))
		}
		cur[r.router], since[r.router] = p, r.at
	}
	return out
}

// overlaps counts the ticks in which two processes of a slot answered /readyz?active=1 with 200.
func overlaps(h *History) int {
	n := 0
	for _, r := range rounds(h) {
		if len(r.active) > 1 {
			n++
		}
	}
	return n
}

// nextActive says, for a fault that hit one process of a slot with a standby, which process logged that
// it streams first after the old one was gone, and which the samples saw active first (a takeover shorter
// than a sample's interval may be missed by the samples): " (proc 0 hit; proc 1 streams 0.87s after; first
// active sample: proc [1] 1.01s after)".
func nextActive(h *History, e Event) string {
	if !h.Setup.Standby || e.Gone.IsZero() {
		return ""
	}
	streams := "no process streams after"
	for _, l := range h.Logs {
		if l.Router == e.Router && l.At.After(e.Gone) && strings.Contains(l.Text, "msg=streaming") {
			streams = fmt.Sprintf("proc %d streams %.2fs after", l.Proc, l.At.Sub(e.Gone).Seconds())
			break
		}
	}
	sample := "none"
	for _, r := range rounds(h) {
		if r.router == e.Router && r.at.After(e.Gone) && len(r.active) > 0 {
			sample = fmt.Sprintf("proc %v %.2fs after", r.active, r.at.Sub(e.Gone).Seconds())
			break
		}
	}
	return fmt.Sprintf(" (proc %d hit; %s; first active sample: %s)", e.Proc, streams, sample)
}
