package check

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// standby is clean() with a hot standby: a sample of both processes every half second to +10s, and
// active(t) names the process that answers /readyz?active=1 with 200 at t (-1: none, 2: both).
func standby(active func(t float64) int) *History {
	h := clean()
	h.Setup.Standby = true
	for i := 0; i <= 20; i++ {
		t := float64(i) / 2
		a := active(t)
		for p := range 2 {
			code := 503
			if a == p || a == 2 {
				code = 200
			}
			h.Ready = append(h.Ready, Sample{At: at(t), Router: 0, Proc: p, Code: 200, Active: code, Round: i})
		}
	}
	return h
}

func violated(h *History, invariant string) []Violation {
	var out []Violation
	for _, v := range Check(h, limits) {
		if v.Invariant == invariant {
			out = append(out, v)
		}
	}
	return out
}

// A SIGKILL of the active process: the standby is active a second later, and the report says so.
func TestTakeoverWithinTheBound(t *testing.T) {
	h := standby(func(t float64) int {
		switch {
		case t < 3:
			return 0
		case t < 4:
			return -1
		}
		return 1
	})
	h.Events = []Event{{From: at(3), To: at(4.5), Gone: at(3.01), Kind: gen.FaultKill, Proc: 0}}
	h.Deliv = append(h.Deliv, Delivery{At: at(4.2), MessageID: "c", Aggregate: "order/1", Version: 3}) // unconfirmed, sent again
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a takeover within the bound: %v", vs)
	}
	if got := Takeovers(h); len(got) != 1 || got[0] != 1500*time.Millisecond {
		t.Fatalf("takeovers %v, want one of 1.5s", got)
	}
	h.Logs = []LogLine{{At: at(3.8), Router: 0, Proc: 1, Level: "INFO", Text: "level=INFO msg=streaming previous=standby"}}
	if r := Applied(h); !strings.Contains(r, "proc 1 streams 0.79s after; first active sample: proc [1] 0.99s after") || !strings.Contains(r, "takeovers") {
		t.Fatalf("the report does not name the takeover:\n%s", r)
	}
	h.Rows = nil // Coverage counts transactions by the writers' aggregate ids, which these are not
	if c := Coverage(h); c["feature:standby"] != 1 || c["seen:takeovers"] != 1 {
		t.Fatalf("coverage %v", c)
	}
}

// No process active for 4 s after a kill (3.5 s from the first sample after it) is past the takeover bound (2 s here), whether or not rows were
// pending; within a PostgreSQL restart and its recovery it is not.
func TestNoActiveRouterPastTheBound(t *testing.T) {
	none := func(t float64) int {
		if t >= 3 && t < 7 {
			return -1
		}
		return 0
	}
	l := limits
	l.Takeover = 2 * time.Second
	h := standby(none)
	h.Events = []Event{{From: at(3), To: at(3.5), Gone: at(3), Kind: gen.FaultKill}}
	vs := Check(h, l)
	if len(vs) != 1 || vs[0].Invariant != "one-active-router" || !strings.Contains(vs[0].Detail, "no active process for 3.5s") ||
		!strings.Contains(vs[0].Detail, "after router-sigkill at +3.00s") {
		t.Fatalf("want one one-active-router violation naming the kill, got %v", vs)
	}
	h.Events = append(h.Events, Event{From: at(2.5), To: at(3.5), Kind: gen.FaultPGFast})
	if vs := Check(h, l); len(vs) != 0 {
		t.Fatalf("no active router during a PostgreSQL restart: %v", vs)
	}
	// A row the broker refuses holds whichever router is active in its retries until its quarantine.
	h.Events = h.Events[:1]
	h.Rows = append(h.Rows, Row{ID: "r", Aggregate: "order/2", Version: 1, Refused: true, Committed: at(2.9)})
	h.Quar = []Quarantined{{EventID: "r", Reason: "RabbitMQ refused this event 3 times in a row", At: at(6)}}
	if vs := Check(h, l); len(vs) != 0 {
		t.Fatalf("no active router while a refused row is retried: %v", vs)
	}
	h.Rows, h.Quar = h.Rows[:3], nil
	// A SIGTERMed router drains until it is gone; the bound counts from its exit.
	h.Events = []Event{{From: at(2), To: at(6.5), Gone: at(6), Kind: gen.FaultTerm}}
	if vs := Check(h, l); len(vs) != 0 {
		t.Fatalf("no active router while the old one drained: %v", vs)
	}
	// The end's stop is no gap.
	h = standby(none)
	h.Stopping = at(3)
	if vs := Check(h, l); len(vs) != 0 {
		t.Fatalf("the routers stopped at the end: %v", vs)
	}
}

// Two processes active in two samples in a row is a split brain; in one sample, the old router may not
// have seen its session end yet.
func TestTwoActiveRoutersAreASplitBrain(t *testing.T) {
	h := standby(func(t float64) int {
		if t == 4 || t == 4.5 {
			return 2
		}
		return 0
	})
	vs := violated(h, "one-active-router")
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "split brain") || !strings.Contains(vs[0].Detail, "+4.50s") {
		t.Fatalf("want a split brain at +4.50s, got %v", vs)
	}
	h = standby(func(t float64) int {
		if t == 4 {
			return 2
		}
		return 0
	})
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("one sample with both active: %v", vs)
	}
	h.Rows = nil
	if c := Coverage(h); c["seen:two-active-in-one-sample"] != 1 {
		t.Fatalf("coverage %v", c)
	}
}

// Two processes copying the initial snapshot (/readyz?active=1 200 in state snapshot) in one tick, read
// within the lease's margin, are a split brain: the slot lock's lease rules that out (seed 8110, where both
// copied for two ticks). Streaming, one tick stays allowed; so do two answers read further apart than the
// margin, and samples recorded without the state.
func TestTwoRoutersCopyingAtOnceAreASplitBrain(t *testing.T) {
	both := func(state string, span time.Duration, withState bool) *History {
		h := standby(func(t float64) int {
			if t == 4 {
				return 2
			}
			return 0
		})
		for i := range h.Ready {
			s := &h.Ready[i]
			if !withState {
				continue
			}
			s.State, s.ActiveAt = "standby", s.At.Add(time.Millisecond)
			if s.Active == 200 {
				s.State = state
			}
			if s.Round == 8 && s.Proc == 1 {
				s.At = h.Ready[i-1].At.Add(span)
				s.ActiveAt = s.At.Add(time.Millisecond)
			}
		}
		return h
	}
	vs := violated(both("snapshot", 5*time.Millisecond, true), "one-active-router")
	if len(vs) != 1 || !strings.Contains(vs[0].Detail, "both copied the initial snapshot") || !strings.Contains(vs[0].Detail, "+4.00s") {
		t.Fatalf("want two routers copying at +4.00s, got %v", vs)
	}
	for _, c := range []struct {
		name string
		h    *History
	}{
		{"streaming", both("streaming", 5*time.Millisecond, true)},
		{"read further apart than the margin", both("snapshot", leaseMargin, true)},
		{"recorded without the state", both("snapshot", 5*time.Millisecond, false)},
	} {
		if vs := Check(c.h, limits); len(vs) != 0 {
			t.Errorf("%s: %v", c.name, vs)
		}
	}
}

// A stall with a standby reads /readyz?active=1: the standby's /readyz 200 does not make a stall silent,
// and a 503 on both with a warning excuses it only while an outage explains that no router is active.
func TestStallWithAStandbyReadsTheActiveRouter(t *testing.T) {
	h := standby(func(t float64) int {
		if t >= 2 && t < 9 {
			return -1
		}
		return 0
	})
	h.Deliv[2].At = at(9) // row c committed at 2, delivered at 9
	h.Logs = []LogLine{{At: at(5), Router: 0, Level: "WARN", Text: `level=WARN msg="PostgreSQL at db:5432 stopped answering"`}}
	h.Events = []Event{{From: at(2), To: at(4), Kind: gen.FaultPGPause}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a stall while PostgreSQL paused: %v", vs)
	}
	// Without the outage: no active router and no cause, the stall is not excused by the 503s.
	h.Events = nil
	broken(t, h, "no-silent-stall", "no progress for 7.0s")
	broken(t, h, "one-active-router", "no active process for 7.0s")
	// The standby answering /readyz 200 while the active one streams: the stall is not excused.
	h = standby(func(float64) int { return 0 })
	h.Deliv[2].At = at(9)
	h.Logs = []LogLine{{At: at(5), Router: 0, Level: "WARN", Text: `level=WARN msg=x`}}
	broken(t, h, "no-silent-stall", "no progress for 7.0s")
}

// After a cut of the active router's PostgreSQL connections its unconfirmed events may come again, within
// the documented bound.
func TestDuplicatesAfterACutOfTheActiveRouter(t *testing.T) {
	h := standby(func(float64) int { return 0 })
	h.Deliv = append(h.Deliv, Delivery{At: at(4), MessageID: "a", Aggregate: "order/1", Version: 1})
	broken(t, h, "duplicates-explained-and-bounded", "no fault or backfill before it")
	h.Events = []Event{{From: at(3), To: at(3), Gone: at(3), Kind: gen.FaultPGCutActive}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a duplicate after pg-cut-active: %v", vs)
	}
	for range 300 {
		h.Deliv = append(h.Deliv, Delivery{At: at(4), MessageID: "b", Aggregate: "order/1", Version: 2})
	}
	broken(t, h, "duplicates-explained-and-bounded", "more than the")
}
