package check

import (
	"fmt"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// rightRefusal is how a router names a right its user lost (gen.FaultPermissions on RabbitMQ,
// gen.FaultPGRights on PostgreSQL): the words of the refusal, and the fix a line naming it must name.
type rightRefusal struct {
	kind  gen.Kind
	names []string // a line naming one of them reports the refusal
	fixes []string // such a line names one of them: the command that grants the right
}

var rightRefusals = []rightRefusal{
	{gen.FaultPermissions, []string{"ACCESS_REFUSED"}, []string{"rabbitmqctl set_permissions"}},
	{gen.FaultPGRights, []string{"has no REPLICATION right", "lacks privileges the router needs", "permission denied", "SQLSTATE 42501"},
		[]string{"ALTER ROLE", "GRANT "}},
}

// names reports whether text reports the refusal.
func (rr rightRefusal) named(text string) bool {
	for _, n := range rr.names {
		if strings.Contains(text, n) {
			return true
		}
	}
	return false
}

func (rr rightRefusal) fixed(text string) bool {
	for _, f := range rr.fixes {
		if strings.Contains(text, f) {
			return true
		}
	}
	return false
}

// refusalOf is the rightRefusal a text names, if any.
func refusalOf(text string) (rightRefusal, bool) {
	for _, rr := range rightRefusals {
		if rr.named(text) {
			return rr, true
		}
	}
	return rightRefusal{}, false
}

// checkAccessRefusals holds the routers to what docs/howto/broker-refusals-and-alarms.md promises when their user loses a right
// (FaultPermissions: RabbitMQ write or configure; FaultPGRights: PostgreSQL REPLICATION or SELECT on the
// outbox), each revoked for a while, then restored: each log line a router writes naming the refusal names
// the command that grants the right (rabbitmqctl set_permissions; ALTER ROLE or GRANT), one of them is an
// ERROR (the router stops: "refusals need a human"), and a router that logged one answers /readyz with 503
// (or not at all) from a second after it until the right is back. A stall it causes is excused only inside
// its window (no-silent-stall, refusalExplains) and ends within the bound after the restore
// (broker-outage-bounded); its exits are no restart loop (refusalExit).
func checkAccessRefusals(h *History, l Limits) []Violation {
	var vs []Violation
	for _, rr := range rightRefusals {
		for _, e := range h.Events {
			if e.Kind != rr.kind {
				continue
			}
			// By process: a standby beside the refused router answers /readyz 200 as
			// docs/howto/run-two-routers.md#readiness
			// says a standby does (it holds no slot and publishes nothing), whatever the active one logs.
			refusedAt := map[procKey]time.Time{}
			refusals := map[procKey][]time.Time{} // every line of each process naming the refusal
			started := map[procKey][]time.Time{}  // each start of a process (the supervisor's starts again)
			errored := map[procKey]bool{}
			for _, ln := range h.Logs {
				if ln.Router >= 0 && strings.Contains(ln.Text, "msg=starting ") {
					k := procKey{ln.Router, ln.Proc}
					started[k] = append(started[k], ln.At)
				}
				// Log lines only (Level set): a process's last words on exit (`cdc-router run: …`) repeat the
				// ERROR line before them.
				if ln.Router < 0 || ln.Level == "" || ln.At.Before(e.From) || ln.At.After(e.To.Add(l.Stall)) || !rr.named(ln.Text) {
					continue
				}
				if !rr.fixed(ln.Text) {
					vs = append(vs, Violation{Detail: fmt.Sprintf("router %d at +%.2fs named the refusal (%s) without the fix, as %s: %s",
						ln.Router, ln.At.Sub(h.Start).Seconds(), e.Kind, ln.Level, Trim(ln.Text, 300)), At: ln.At})
				}
				k := procKey{ln.Router, ln.Proc}
				refusals[k] = append(refusals[k], ln.At)
				errored[k] = errored[k] || ln.Level == "ERROR"
				if t, ok := refusedAt[k]; !ok || ln.At.Before(t) {
					refusedAt[k] = ln.At
				}
			}
			for k, t := range refusedAt {
				if !errored[k] {
					vs = append(vs, Violation{Detail: fmt.Sprintf("router %d named the refusal (%s) from +%.2fs but never at ERROR",
						k.router, e.Kind, t.Sub(h.Start).Seconds()), At: t})
				}
			}
			for _, s := range h.Ready {
				if h.Setup.Standby && s.Active != 200 {
					// Standing by (its /readyz?active=1 said otherwise): 200 as docs/howto/run-two-routers.md#readiness says, also
					// when it is the refused process started again, which found the slot held (seed 7013). A
					// standby checks no right until it holds the slot (docs/testing.md#what-it-found).
					continue
				}
				k := procKey{s.Router, s.Proc}
				t, ok := refusedAt[k]
				// A second after the line: /readyz reads the state the line reports. A process the supervisor
				// started again after the line has not met the refusal yet (seed 8032: 200 for 10 ms between
				// its stream's start and its first publish, which the broker refused).
				if ok && s.Code == 200 && s.At.After(t.Add(time.Second)) && s.At.Before(e.To) && !startedSince(refusals[k], started[k], s.At) {
					vs = append(vs, Violation{Detail: fmt.Sprintf("router %d answered /readyz 200 at +%.2fs while its user lacked the right "+
						"(%s: refused at +%.2fs, restored at +%.2fs)", s.Router, s.At.Sub(h.Start).Seconds(), e.Kind, t.Sub(h.Start).Seconds(),
						e.To.Sub(h.Start).Seconds()), At: s.At})
					break
				}
			}
		}
	}
	return compress(vs, 5)
}

// startedSince reports whether the process was started again after its last refusal line before at (a
// second before: the line's state is read a moment later), and before at: the sample is then the new
// process's, which has not met the refusal.
func startedSince(refusals, starts []time.Time, at time.Time) bool {
	var last time.Time
	for _, r := range refusals {
		if r.Before(at.Add(-time.Second)) && r.After(last) {
			last = r
		}
	}
	for _, st := range starts {
		if st.After(last) && st.Before(at) {
			return true
		}
	}
	return false
}

// procKey is one router process: its router and, with a standby, which of the two (Proc).
type procKey struct{ router, proc int }

// refusalExit reports whether a router's exit was the refusal of a right its user lost (the router exits
// naming the right to grant: docs/howto/monitor.md#logs) while that right was revoked or within the stall
// bound after its restore: held behind a refusal that names the fix (access-refusal-names-the-fix checks
// the line), not a loop.
func refusalExit(h *History, exit Event, l Limits) bool {
	rr, ok := refusalOf(exit.Note)
	if !ok {
		return false
	}
	_, ok = eventAround(h, rr.kind, exit.From, l.Stall)
	return ok
}

// refusalExplains reports whether a line naming a lost right at `at` may excuse a stall that lasted until
// to: only when the line came while that right was revoked or within bound after its restore, and the
// stall ended within bound after the restore. A refusal explains its own window, not a stall that outlasts
// it. A line naming no such refusal is not this function's to judge (true).
func refusalExplains(h *History, text string, at, to time.Time, bound time.Duration) bool {
	rr, ok := refusalOf(text)
	if !ok {
		return true
	}
	e, ok := eventAround(h, rr.kind, at, bound)
	return ok && !to.After(e.To.Add(bound))
}
