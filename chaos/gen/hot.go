package gen

import (
	"math/rand/v2"
	"sort"
	"time"
)

// OpHot is a hot-aggregate transaction under repeated faults (issue 36, finding 3), run by the runner once
// every router streams: N rows of public.outbox in one transaction, every other one a version of one hot
// aggregate of its own, the others one event each of aggregates of their own. The hot aggregate drains at
// one event per confirm (ADR 0006) while the one-event aggregates are confirmed at once, so the
// transaction's confirmed items have gaps for as long as it drains. Three or four PostgreSQL cuts and
// router SIGKILLs follow it in the schedule (the runner applies faults one after another, so they come
// after its commit), and the checker's hot-duplicates-per-fault rule bounds what each publishes of it again.
const OpHot Kind = "hot-transaction"

// hotWindow bounds --lanes × --window on a plan with OpHot: the duplicates a fault may cause are the
// in-flight window, and the one-event aggregates a fault would publish again if the router recorded only
// the gap-free prefix of the transaction (thousands) must stand out above it.
const hotWindow = 256

// addHot gives a quarter of the seeds without the huge transaction one OpHot of 4,000–10,000 rows between a
// tenth and a quarter of the duration, followed by three or four faults (a PostgreSQL cut or a SIGKILL of
// a router, 0.1–0.6 s down) 2–3.5 s apart from 1.5 s after it, and caps their --window so that --lanes ×
// --window is at most hotWindow. It draws from a generator of its own and comes after every other, so
// that no other choice of a plan changes; under its stream (0x4078) the CI seeds do not draw it
// (TestCISeedsDrawNoPauseNorHot).
func addHot(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x4078))
	if r.IntN(4) != 0 || p.Has(OpHuge) {
		return
	}
	s := &p.Setup
	s.Window = min(s.Window, max(hotWindow/s.Lanes, 8))
	if s.AggregateWindow > s.Window {
		s.AggregateWindow = s.Window
	}
	at := s.Duration/10 + time.Duration(r.Int64N(int64(s.Duration*3/20)))
	p.Faults = append(p.Faults, Step{At: at, Kind: OpHot, N: 4000 + r.IntN(6001)})
	at += 1500 * time.Millisecond
	for range 3 + r.IntN(2) {
		f := Step{At: at, Kind: pick(r, FaultPGCut, FaultKill)}
		if f.Kind == FaultKill {
			f.Router, f.Dur = r.IntN(s.Routers()), time.Duration(100+r.IntN(500))*time.Millisecond
		}
		p.Faults = append(p.Faults, f)
		at += time.Duration(2000+r.IntN(1500)) * time.Millisecond
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}
