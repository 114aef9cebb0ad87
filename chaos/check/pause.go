package check

import (
	"fmt"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// A gen.FaultPause's event (the runner's pauseFault) runs from the SIGSTOP of the slot's streaming process
// (Event.Proc) to its SIGCONT; its note holds PauseStandbyReady when the slot's other process stood by at
// the SIGSTOP, and PauseEndedNote when the paused process's walsender was terminated during the pause.
const (
	PauseStandbyReady = "the other process stood by"
	PauseEndedNote    = "walsender terminated"
)

// pauseSlack is what the takeover bound allows past --lease (ADR 0010): the walsender ends --lease after the
// router's last status update, at most a status interval (1 s) before the pause, and the router standing by
// tries every second and starts in 30–130 ms.
const pauseSlack = 2 * time.Second

// pauseJump is replication.Fence's bound on a hold-up with gen.PauseLease (a quarter of it, at most 1 s),
// with the margin of the runner's measure of the pause: a longer pause breaks the paused router's fence,
// so that it writes nothing more once continued. ADR 0010 leaves a shorter one out ("what the fence does
// not cover").
const pauseJump = 1100 * time.Millisecond

// pauseWindow is how long after a pause's SIGCONT deliveries are judged for a write of the paused process:
// it writes what it held right after it is continued.
const pauseWindow = 10 * time.Second

// pauses are the pause events that were applied (not skipped).
func pauses(h *History) []Event {
	var out []Event
	for _, e := range h.Events {
		if e.Kind == gen.FaultPause && !strings.HasPrefix(e.Note, "skipped") {
			out = append(out, e)
		}
	}
	return out
}

// streamsIn reports when a process of slot router first streamed in (from, to]: a `msg=streaming` line, or a
// /readyz?active=1 200 sample; a line or a sample of process paused counts only after pausedUntil (it was
// stopped before). ok is false when none did.
func streamsIn(h *History, router, paused int, pausedUntil, from, to time.Time) (time.Time, bool) {
	var first time.Time
	note := func(at time.Time, proc int) {
		if at.After(from) && !at.After(to) && (proc != paused || at.After(pausedUntil)) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	for _, l := range h.Logs {
		if l.Router == router && strings.Contains(l.Text, "msg=streaming") {
			note(l.At, l.Proc)
		}
	}
	for _, s := range h.Ready {
		if s.Router == router && s.Active == 200 {
			at := s.ActiveAt // when the answer came: a paused process answers once continued (seed 31)
			if at.IsZero() {
				at = s.At
			}
			note(at, s.Proc)
		}
	}
	return first, !first.IsZero()
}

// disturbed reports whether another fault or command that may keep a slot from streaming (not in noOutage,
// not e itself) overlaps from..to, or the run's end stop began before to: the pause's bound is then not
// the only thing judged.
func disturbed(h *History, e Event, from, to time.Time) bool {
	if !h.Stopping.IsZero() && h.Stopping.Before(to) {
		return true
	}
	for _, o := range h.Events {
		if o.Kind == e.Kind && o.From.Equal(e.From) || noOutage[o.Kind] {
			continue
		}
		if o.From.Before(to) && !o.To.Before(from) {
			return true
		}
	}
	return false
}

// checkPauseTakeover holds a paused router to ADR 0010's bound: after a pause longer than --lease, or one
// during which its walsender was terminated, a process of its slot streams within --lease + pauseSlack of
// the SIGSTOP (the other one while it is paused); after a shorter pause, within --lease + pauseSlack of the
// SIGCONT. A pause while another fault overlaps the bound, or with no process standing by beside the paused
// one for a takeover during it, is judged from the SIGCONT.
func checkPauseTakeover(h *History, _ Limits) []Violation {
	var vs []Violation
	for _, e := range pauses(h) {
		dur, ended := e.To.Sub(e.From), strings.Contains(e.Note, PauseEndedNote)
		from, by, what := e.To, e.To.Add(gen.PauseLease+pauseSlack), "its SIGCONT"
		if (dur > gen.PauseLease || ended) && strings.Contains(e.Note, PauseStandbyReady) {
			from, by, what = e.From, e.From.Add(gen.PauseLease+pauseSlack), "its SIGSTOP"
		}
		if disturbed(h, e, e.From, by) {
			continue
		}
		if _, ok := streamsIn(h, e.Router, e.Proc, e.To, from, by); ok {
			continue
		}
		vs = append(vs, Violation{Detail: fmt.Sprintf("router %d's process %d was paused for %.2fs at +%.2fs (%s), and no process "+
			"of the slot streamed within %v of %s (--lease %v + %v; ADR 0010: a router that stops answering keeps the slot at most "+
			"--lease after its last status update, and the router standing by streams within --lease and its next attempt)",
			e.Router, e.Proc, dur.Seconds(), e.From.Sub(h.Start).Seconds(), e.Note, gen.PauseLease+pauseSlack, what,
			gen.PauseLease, pauseSlack), At: e.From})
	}
	return vs
}

// staleAfterPause finds, for pause e, the deliveries that went back in their aggregate's versions after
// the SIGCONT: the slot's other process streamed during the pause (it took over) at takeover, and a stream
// delivery (not a backfill's or a replay's copy, not a redelivery to the harness's consumer) in the
// pauseWindow after the SIGCONT is of a version below one that arrived since the takeover. Within one
// stream session an aggregate's deliveries are in version order, so only another publisher can have sent
// it: the paused process, continued. The window ends early at the next stream session of any router (a
// restart replays from the acknowledged position, legitimately going back: "What a crash duplicates"), at
// the next fault or command that may replay, and at the run's end stop.
func staleAfterPause(h *History, e Event) (stale []Delivery, highest []int64, takeover time.Time) {
	takeover, ok := streamsIn(h, e.Router, e.Proc, e.To.Add(time.Hour), e.From, e.To)
	if !ok {
		return nil, nil, time.Time{}
	}
	end := e.To.Add(pauseWindow)
	if !h.Stopping.IsZero() && h.Stopping.Before(end) {
		end = h.Stopping
	}
	for _, l := range h.Logs {
		if l.Router >= 0 && l.At.After(e.To) && l.At.Before(end) && strings.Contains(l.Text, "msg=streaming") {
			end = l.At
		}
	}
	for _, o := range h.Events {
		if !noOutage[o.Kind] && o.From.After(e.To) && o.From.Before(end) {
			end = o.From
		}
	}
	// The versions are compared from the last stream session to begin before the SIGCONT on (the one that
	// took over, or a restart of it, which went back to the acknowledged position).
	since := takeover
	for _, l := range h.Logs {
		if l.Router >= 0 && l.At.After(since) && !l.At.After(e.To) && strings.Contains(l.Text, "msg=streaming") {
			since = l.At
		}
	}
	top := map[string]int64{}
	for _, d := range h.Deliv {
		if d.Backfill || d.Replayed || d.Redelivered || d.At.Before(since) || !d.At.Before(end) {
			continue
		}
		if v := top[d.Aggregate]; d.At.After(e.To) && d.Version < v {
			stale, highest = append(stale, d), append(highest, v)
		}
		top[d.Aggregate] = max(top[d.Aggregate], d.Version)
	}
	return stale, highest, takeover
}

// checkPausedWrites holds a router paused past the fence's bound on a hold-up (pauseJump), whose slot the
// other process took over meanwhile, to ADR 0010's promise: once continued it writes nothing more to
// RabbitMQ, so no delivery after its SIGCONT goes back in its aggregate's versions (staleAfterPause). Issue
// 36's finding 2 was such a write: `a9 v102` 2.4 s after the standby had delivered v282–v334. A shorter
// pause during which the walsender was terminated is outside the fence (ADR 0010) and only counted
// (coverage seen:stale-write-after-short-pause). The first deliveries' order, invariant 2, holds as for
// every run.
func checkPausedWrites(h *History, _ Limits) []Violation {
	var vs []Violation
	for _, e := range pauses(h) {
		if e.To.Sub(e.From) <= pauseJump {
			continue
		}
		stale, highest, takeover := staleAfterPause(h, e)
		if len(stale) == 0 {
			continue
		}
		d := stale[0]
		vs = append(vs, Violation{Detail: fmt.Sprintf("%s v%d delivered at +%.2fs, %.2fs after router %d's process %d was continued "+
			"from a %.2fs pause, after v%d that the slot's other process, streaming since +%.2fs, had delivered (%d such deliveries): "+
			"a router published after it lost the slot (ADR 0010: a router that comes back writes nothing more to RabbitMQ)",
			d.Aggregate, d.Version, d.At.Sub(h.Start).Seconds(), d.At.Sub(e.To).Seconds(), e.Router, e.Proc, e.To.Sub(e.From).Seconds(),
			highest[0], takeover.Sub(h.Start).Seconds(), len(stale)), Aggregate: d.Aggregate, At: d.At})
	}
	return vs
}

// pauseCoverage counts the pauses by class, those the other process took over during, with the takeover's
// time after the SIGSTOP in tenths of seconds summed (seen:pause-takeover-tenths, for the mean), and the
// deliveries going back after a short pause with the walsender terminated (outside the fence).
func pauseCoverage(h *History, c map[string]int) {
	for _, e := range pauses(h) {
		dur := e.To.Sub(e.From)
		switch {
		case dur <= pauseJump:
			c["seen:pause-short"]++
		case dur <= gen.PauseLease:
			c["seen:pause-under-lease"]++
		default:
			c["seen:pause-past-lease"]++
		}
		if strings.Contains(e.Note, PauseEndedNote) {
			c["seen:pause-walsender-terminated"]++
		}
		if at, ok := streamsIn(h, e.Router, e.Proc, e.To.Add(time.Hour), e.From, e.To); ok {
			c["seen:pause-taken-over"]++
			c["seen:pause-takeover-tenths"] += int(at.Sub(e.From) / (100 * time.Millisecond))
		}
		if stale, _, _ := staleAfterPause(h, e); dur <= pauseJump && len(stale) > 0 {
			c["seen:stale-write-after-short-pause"] += len(stale)
		}
	}
}
