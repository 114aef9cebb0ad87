package route

import (
	"context"
	"math"
	"time"
)

// vegas is the adaptive in-flight limit of one lane (Config.AdaptiveWindow): TCP Vegas's congestion
// avoidance applied to publisher confirms, as Netflix's concurrency-limits applies it to requests
// (VegasLimit). It compares the confirm round trip of each round of samples with the least round trip seen
// (the no-load round trip, base) and estimates how many of the lane's messages wait in the broker rather
// than travel or get processed:
//
//	queue = limit × (1 − base/rtt)
//
// and keeps that estimate between alpha and beta, a few messages, so the broker is kept busy without a
// backlog of unconfirmed messages in its queues (a classic queue with a backlog takes its disk path and
// spends about twice the CPU per message: docs/benchmarks.md). While nothing waits it grows the limit,
// doubling per round until the first round that sees messages wait (slow start), then by beta; it shrinks
// the limit towards the size that would leave alpha waiting, by half at most per round. A lane that does
// not use half of its limit (the rate, not the broker, bounds it) does not grow it.
//
// The limit stays within [floor, ceiling]: ceiling is Config.Window, floor the smaller of vegasFloor and
// ceiling. vegas is used by one goroutine (the lane's confirmLoop); the window it sets is shared.
type vegas struct {
	floor, ceiling int
	limit          float64
	slowStart      bool

	base time.Duration // the least round minimum since the last probe; 0 before the first round ends

	// The round in progress: it ends after as many samples as the limit was when it began.
	size int
	n    int
	min  time.Duration // the least round trip of the round
	peak int           // the most messages in flight at a sample of the round

	// The probe (BBR's ProbeRTT): every probeRounds rounds the limit drops to the floor until the lane's
	// in flight is down to it, then base is measured again from floor samples taken with at most floor in
	// flight (it may go up: a broker since moved further away; or down), and the limit goes back to where it
	// was. A round trip measured under load is never taken as the no-load one, so base cannot creep up with
	// the limit.
	rounds  int
	probing bool
	resume  float64 // the limit to go back to after the probe
}

const (
	vegasInitial = 16
	vegasFloor   = 4
	probeRounds  = 100
)

func newVegas(ceiling int) *vegas {
	floor := min(vegasFloor, ceiling)
	v := &vegas{floor: floor, ceiling: ceiling, limit: float64(min(vegasInitial, ceiling)), slowStart: true}
	v.size = v.current()
	return v
}

// current is the limit as a whole number of messages.
func (v *vegas) current() int { return int(v.limit) }

// sample takes the round trip of one confirm and the number of the lane's messages in flight when it was
// taken, and returns the limit.
func (v *vegas) sample(rtt time.Duration, inflight int) int {
	if rtt <= 0 {
		rtt = 1 // a clock that did not move: treat as the least possible round trip
	}
	if v.probing {
		return v.probe(rtt, inflight)
	}
	if v.n == 0 || rtt < v.min {
		v.min = rtt
	}
	v.peak = max(v.peak, inflight)
	v.n++
	if v.n < v.size {
		return v.current()
	}
	v.endRound()
	return v.current()
}

// endRound applies the rules above to the round that ended and begins the next.
func (v *vegas) endRound() {
	rtt, peak := v.min, v.peak
	v.n, v.peak = 0, 0
	v.rounds++
	if v.base == 0 || rtt < v.base {
		v.base = rtt
	}
	limit := v.limit
	queue := limit * (1 - float64(v.base)/float64(rtt))
	lg := math.Max(1, math.Log10(limit))
	alpha, beta := 3*lg, 6*lg
	appLimited := float64(peak)*2 < limit
	switch {
	case queue > beta:
		v.slowStart = false
		target := limit*float64(v.base)/float64(rtt) + alpha
		limit = math.Max(target, limit/2)
	case queue > alpha:
		v.slowStart = false
	case appLimited:
	case v.slowStart:
		limit *= 2
	case queue <= lg:
		limit += beta
	default:
		limit += lg
	}
	v.limit = math.Min(math.Max(limit, float64(v.floor)), float64(v.ceiling))
	v.size = v.current()
	if v.rounds%probeRounds == 0 {
		v.probing, v.resume, v.limit = true, v.limit, float64(v.floor)
	}
}

// probe takes a sample during the probe: those taken while more than the floor is in flight (the lane
// draining down to it) are left out; the first floor samples taken at the floor measure base.
func (v *vegas) probe(rtt time.Duration, inflight int) int {
	if inflight > v.floor {
		return v.current()
	}
	if v.n == 0 || rtt < v.min {
		v.min = rtt
	}
	v.n++
	if v.n < v.floor {
		return v.current()
	}
	v.base, v.n, v.peak = v.min, 0, 0
	v.probing, v.limit = false, v.resume
	v.size = v.current()
	return v.current()
}

// window is a lane's in-flight limit: one unit per queued or written publishing, as many at most as the
// lane's vegas allows (or Config.Window, fixed). A limit that shrinks below what is in flight lets no new
// publishing in until enough are confirmed; it never takes back what is in flight.
type window struct {
	units *budget
	v     *vegas // nil: fixed
}

func newWindow(ceiling int, adaptive bool) *window {
	w := &window{units: newBudget(ceiling)}
	if adaptive {
		w.v = newVegas(ceiling)
		w.units.max = w.v.current()
	}
	return w
}

// acquire takes a unit, waiting while the lane is at its limit; errors as budget.acquire.
func (w *window) acquire(ctx context.Context, failed <-chan struct{}) error {
	return w.units.acquire(ctx, failed, 1)
}

// release gives a unit back.
func (w *window) release() { w.units.release(1) }

// confirmed takes the round trip of one confirm and adapts the limit; called by the lane's confirmLoop
// only.
func (w *window) confirmed(rtt time.Duration) {
	if w.v == nil {
		return
	}
	w.units.adjust(func(used int) int { return w.v.sample(rtt, used) })
}

// limit is the lane's limit now.
func (w *window) limit() int {
	w.units.mu.Lock()
	defer w.units.mu.Unlock()
	return w.units.max
}

// adjust sets the budget's maximum to what f returns for the units used now; a raise wakes the acquires
// that wait.
func (b *budget) adjust(f func(used int) int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := f(b.used)
	raised := n > b.max
	b.max = n
	if raised && b.waiting {
		close(b.freed)
		b.freed, b.waiting = make(chan struct{}), false
	}
}
