package check

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// The duplicates a fault may cause of a large transaction, as the docs' "What a crash duplicates" (progress
// inside a transaction is kept) and ADR 0004's addendum of issue 36 state them: the events that were written and
// unconfirmed (at most --lanes × --window) per fault, plus, after SIGKILL, the events confirmed since the
// last stored mark (the position is stored at most once a second), plus the later transactions that were
// received but not acknowledged. Events waiting behind their aggregate are published for the first time,
// no duplicates. The checker counts a fault as the stream session it makes a router start (each logs
// `msg=streaming`, with previous=restarting inside the process, previous=starting or standby in a process
// that did not run the session before).
const (
	// storedMarkAge is how old the mark a new process reads may be: a second, and a second's margin for the
	// store and the consumer's receipt.
	storedMarkAge = 2 * time.Second
	// ackLag is how long after an event's delivery its confirm may still be unacknowledged inside the
	// process (the batched status update, the confirm's way back).
	ackLag = 200 * time.Millisecond
	// pgOutage is how far before a process's end a PostgreSQL fault may have kept it from storing its mark.
	pgOutage = 5 * time.Second
)

// pgFault are the kinds that keep a router from storing its position and mark.
var pgFault = map[gen.Kind]bool{gen.FaultPGCut: true, gen.FaultPGPause: true, gen.FaultPGHole: true, gen.FaultPGFast: true,
	gen.FaultPGCrash: true, gen.FaultPGCutActive: true, gen.FaultPGRights: true}

// hotTxn is one gen.OpHot transaction's rows, by id, and when it committed.
type hotTxn struct {
	xid       int // Row.Txn of its rows: the transaction's id, as the routers log it
	ids       map[string]bool
	committed time.Time
	hot       string // the hot aggregate
	rows      int
}

func hotTxns(h *History) []hotTxn {
	byTxn := map[int]*hotTxn{}
	var order []int
	for _, r := range h.Rows {
		if r.Op != gen.OpHot {
			continue
		}
		t := byTxn[r.Txn]
		if t == nil {
			t = &hotTxn{xid: r.Txn, ids: map[string]bool{}}
			byTxn[r.Txn] = t
			order = append(order, r.Txn)
		}
		t.ids[r.ID] = true
		t.rows++
		if r.Committed.After(t.committed) {
			t.committed = r.Committed
		}
		if r.Version > 1 {
			t.hot = r.Aggregate
		}
	}
	out := make([]hotTxn, 0, len(order))
	for _, n := range order {
		out = append(out, *byTxn[n])
	}
	return out
}

// session is a stream session's start: a router's `msg=streaming` line.
type session struct {
	at       time.Time
	router   int
	previous string
}

func sessionsAfter(h *History, t time.Time) []session {
	var out []session
	for _, l := range h.Logs {
		if l.Router >= 0 && l.At.After(t) && strings.Contains(l.Text, "msg=streaming") {
			out = append(out, session{l.At, l.Router, logField(l.Text, "previous")})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// resumesInside reports whether session s logged that it resumes inside transaction xid (`resuming inside a
// transaction … xid=`, right after its `msg=streaming`): that transaction was then the oldest one not
// acknowledged, and the session passes over what its mark covers. Otherwise t was a later transaction
// received but not acknowledged (the session resumed inside an older one, or had no mark), which the docs
// let a fault publish again whole.
func resumesInside(h *History, s session, xid int) bool {
	want := fmt.Sprint(xid)
	for _, l := range h.Logs {
		if l.Router == s.router && !l.At.Before(s.at) && l.At.Before(s.at.Add(resumeLine)) &&
			strings.Contains(l.Text, "resuming inside a transaction") {
			return logField(l.Text, "xid") == want
		}
	}
	return false
}

// resumeLine bounds how long after its `msg=streaming` a session logs that it resumes inside a transaction.
const resumeLine = 5 * time.Second

// replayAllowance is how many of t's events session s may publish again beside the in-flight window: the
// fault that ended the session before it began at `fault` (the last fault or command that may replay, or
// the session's start when none came since the commit), and that session went on publishing until its
// `stream stopped` line (seed 180: 476 events first delivered between a PostgreSQL cut and that line); a
// new process (previous starting or standby) reads the stored mark, which may miss the confirms of the
// storedMarkAge before the fault (more while a PostgreSQL fault kept the old process from storing), a
// restart inside the process the confirms of the last ackLag. Unless the session resumed inside t
// (resumesInside), t was a later transaction received but not acknowledged, published again whole: every
// event of t delivered until the old session stopped (seed 180: behind a burst committed 30 ms before it,
// unacknowledged for 11 s).
func replayAllowance(h *History, t hotTxn, s session, first map[string]time.Time) int {
	fault := t.committed
	for _, e := range h.Events {
		if !noOutage[e.Kind] && e.From.After(fault) && e.From.Before(s.at) {
			fault = e.From
		}
	}
	if fault.Equal(t.committed) {
		fault = s.at
	}
	lo := fault.Add(-ackLag)
	if s.previous == "starting" || s.previous == "standby" {
		lo = fault.Add(-storedMarkAge)
		for _, e := range h.Events {
			if pgFault[e.Kind] && e.From.Before(fault) && e.To.After(fault.Add(-pgOutage)) && e.From.Before(lo) {
				lo = e.From
			}
		}
	}
	if !resumesInside(h, s, t.xid) {
		lo = t.committed // t was not the oldest transaction unacknowledged: all of it delivered so far
	}
	// The old session went on publishing until it stopped (its `stream stopped` line), after the fault began.
	end := fault
	for _, l := range h.Logs {
		if l.Router == s.router && l.At.After(end) && l.At.Before(s.at) && strings.Contains(l.Text, "stream stopped") {
			end = l.At
		}
	}
	end = end.Add(ackLag)
	n := 0
	for _, at := range first {
		if !at.Before(lo) && !at.After(end) {
			n++
		}
	}
	return n
}

// checkHotDuplicates bounds the duplicates of each gen.OpHot transaction per fault by what the docs say a
// fault republishes (the constants above): walking its events' repeated stream deliveries (not a
// backfill's or a replay's copies, not the broker's redeliveries to the harness's consumer) in time order,
// their count never passes the sum over the stream sessions begun since its commit of --lanes × --window
// and each session's replayAllowance. Issue 36's finding 3: with the mark the gap-free prefix, every fault
// republished the one-event aggregates behind the hot one (about 18,600 per PostgreSQL cut).
func checkHotDuplicates(h *History, _ Limits) []Violation {
	var vs []Violation
	window := h.Setup.Lanes * h.Setup.Window
	for _, t := range hotTxns(h) {
		first := map[string]time.Time{}
		var dups []Delivery
		for _, d := range h.Deliv {
			if !t.ids[d.MessageID] || d.Backfill || d.Replayed || d.Redelivered {
				continue
			}
			if _, ok := first[d.MessageID]; ok {
				dups = append(dups, d)
			} else {
				first[d.MessageID] = d.At
			}
		}
		if len(dups) == 0 {
			continue
		}
		sessions := sessionsAfter(h, t.committed)
		budget, next := 0, 0
		var per []string
		for i, d := range dups {
			for next < len(sessions) && !sessions[next].at.After(d.At) {
				s := sessions[next]
				extra := replayAllowance(h, t, s, first)
				budget += window + extra
				per = append(per, fmt.Sprintf("+%.2fs router %d previous=%s: %d+%d", s.at.Sub(h.Start).Seconds(), s.router, s.previous, window, extra))
				next++
			}
			if i+1 > budget {
				vs = append(vs, Violation{Detail: fmt.Sprintf("hot transaction of %d rows (%s, committed at +%.2fs): %d duplicate deliveries of its "+
					"events by +%.2fs (%d in all), more than the %d that the %d stream sessions begun since its commit may publish again "+
					"(ADR 0004's addendum, What a crash duplicates: per fault at most the events written and unconfirmed, "+
					"--lanes × --window = %d, plus after SIGKILL those confirmed in the last second, plus the later transactions received "+
					"but not acknowledged); sessions (window+allowance): %s", t.rows, t.hot, t.committed.Sub(h.Start).Seconds(), i+1,
					d.At.Sub(h.Start).Seconds(), len(dups), budget, next, window, strings.Join(per, ", ")), Aggregate: d.Aggregate, At: d.At})
				break
			}
		}
	}
	return vs
}

// hotCoverage counts each hot transaction's repeated stream deliveries and the stream sessions begun while
// it drained (from its commit to its last event's first delivery): their ratio is the duplicates per
// fault of the hot shape.
func hotCoverage(h *History, c map[string]int) {
	for _, t := range hotTxns(h) {
		c["op:hot-transaction-rows"] += t.rows
		seen := map[string]bool{}
		var last time.Time
		for _, d := range h.Deliv {
			if !t.ids[d.MessageID] || d.Backfill || d.Replayed || d.Redelivered {
				continue
			}
			if seen[d.MessageID] {
				c["seen:hot-duplicates"]++
				continue
			}
			seen[d.MessageID], last = true, d.At
		}
		for _, s := range sessionsAfter(h, t.committed) {
			if !s.at.After(last) {
				c["seen:hot-sessions"]++
			}
		}
	}
}
