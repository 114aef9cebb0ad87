package route

import (
	"context"
	"math"
	"sync"
	"time"
)

// vegas is the adaptive in-flight limit of a Router's lanes (Config.AdaptiveWindow): TCP Vegas's congestion
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
// Vegas reads a round trip that grows with what is in flight as a queue, which it is at a broker that
// serves messages one at a time. A broker that batches (a quorum queue appends every message that arrived
// during the last Raft write in one write; a broker behind a slow link confirms in bursts) confirms more
// messages per second the more are in flight, although each waits longer: Vegas alone keeps such a lane
// at a fraction of its rate (0.38 to 0.54 of the best fixed window on a quorum queue here, docs/benchmarks.md).
// So the limit also climbs by the confirm rate (climb, below): a lane that was busy for climbEvery epochs
// (each at least epochMin long; twice as many after each try that did not pay, up to climbMost) in which
// Vegas did not grow the limit tries a limit climbStep times larger; when the confirm rate of the second
// epoch at that limit is climbGain or more above the rate before the try, the larger limit stays and
// Vegas does not shrink below it (rateFloor); otherwise the limit goes back. Once a rate floor is set, the
// tries alternate with tries of a limit climbStep times smaller, which lowers the floor when it keeps
// keepRate of the rate: the floor follows a broker that stops paying for a larger window.
//
// The limit stays within [floor, ceiling]: ceiling is Config.Window, floor the smaller of vegasFloor and
// ceiling. vegas is the Router's, fed by every lane's confirms under its limiter's lock (limiter); each
// lane's window takes its limit.
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

	climb climb
	lanes int // the lanes that take the limit (limiter): a round is the limit's samples of each
}

// climb is the limit's search by confirm rate (see vegas).
type climb struct {
	start time.Time // the epoch's first sample; zero before the first
	n     int       // samples in the epoch
	idle  bool      // a round that ended in the epoch was app-limited
	grew  bool      // Vegas grew the limit in the epoch: its rate says nothing of a try's
	skip  bool      // the next round ends without a verdict: the climb changed the limit during it

	busyEpochs int     // busy epochs in a row since the last try
	wait       int     // busy epochs before the next try: climbEvery, doubled by each try that failed
	phase      int     // climbSteady, climbSettle (the try's first epoch), climbMeasure (its second)
	up         bool    // the try is of a larger limit
	from       float64 // the limit before the try
	before     float64 // the confirm rate (per second) of the last busy epoch before the try
	last, prev float64 // the confirm rates of the last two busy epochs (a try is judged against their mean)
	rateFloor  float64 // the least limit Vegas may shrink to: the last larger limit that paid; 0 while none
	nextDown   bool    // the next try is of a smaller limit (alternating once rateFloor is set)
}

const (
	climbSteady = iota
	climbSettle
	climbMeasure
)

const (
	vegasInitial = 16
	vegasFloor   = 4
	probeRounds  = 100

	epochMin   = 200 * time.Millisecond // an epoch of the climb: samples over at least this long
	climbEvery = 5                      // busy epochs between two tries, at first and after a try that paid
	climbMost  = 40                     // … doubled after each that did not, up to this many (8 s)
	climbStep  = 1.5                    // a try's limit is this many times larger, or smaller
	climbGain  = 1.05                   // a larger limit stays when it brings this much more rate
	keepRate   = 0.97                   // a smaller one stays when it keeps this much of the rate
)

func newVegas(ceiling int) *vegas {
	floor := min(vegasFloor, ceiling)
	v := &vegas{floor: floor, ceiling: ceiling, limit: float64(min(vegasInitial, ceiling)), slowStart: true}
	v.size = v.roundSize()
	return v
}

// current is the limit as a whole number of messages.
func (v *vegas) current() int { return int(v.limit) }

// roundSize is the samples of a round: about one round trip's confirms of every lane at the limit.
func (v *vegas) roundSize() int { return v.current() * max(v.lanes, 1) }

// sample takes the time of one confirm, its round trip and the number of the lane's messages in flight
// when it was taken, and returns the limit.
func (v *vegas) sample(at time.Time, rtt time.Duration, inflight int) int {
	if rtt <= 0 {
		rtt = 1 // a clock that did not move: treat as the least possible round trip
	}
	v.epoch(at)
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
	if appLimited {
		v.climb.idle = true
	}
	if v.climb.phase != climbSteady || v.climb.skip { // a try holds the limit it set until it is judged
		v.climb.skip = false
		v.size = v.roundSize()
		return
	}
	before := limit
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
	v.limit = math.Min(max(limit, float64(v.floor), v.climb.rateFloor), float64(v.ceiling))
	if v.limit > before {
		v.climb.grew = true
	}
	v.size = v.roundSize()
	if v.rounds%probeRounds == 0 {
		v.probing, v.resume, v.limit = true, v.limit, float64(v.floor)
	}
}

// epoch counts a sample into the climb's epoch and, once the epoch is epochMin long, judges it: the
// confirm rate of a busy epoch (no app-limited round in it) starts, or judges, a try of another limit.
func (v *vegas) epoch(at time.Time) {
	c := &v.climb
	if c.start.IsZero() || at.Before(c.start) {
		c.start, c.n, c.idle = at, 0, false
		return
	}
	c.n++
	elapsed := at.Sub(c.start)
	if elapsed < epochMin {
		return
	}
	rate, busy, grew := float64(c.n)/elapsed.Seconds(), !c.idle && !v.probing, c.grew
	c.start, c.n, c.idle, c.grew = at, 0, false, false
	was := v.limit
	defer func() {
		if v.limit != was { // the round in progress measured the old limit
			v.n, v.peak, c.skip = 0, 0, true
		}
		v.size = v.roundSize()
	}()
	switch c.phase {
	case climbSettle: // the first epoch at the tried limit fills (or drains) the window: not judged
		c.phase = climbMeasure
		if !busy {
			c.phase, v.limit = climbSteady, c.from
		}
	case climbMeasure:
		c.phase, c.busyEpochs = climbSteady, 0
		switch {
		case !busy: // the rate no longer says anything about the limit
			v.limit = c.from
		case c.up && rate >= c.before*climbGain:
			c.rateFloor, c.wait = v.limit, climbEvery
		case !c.up && rate >= c.before*keepRate:
			c.rateFloor, c.wait = v.limit, climbEvery
			if c.rateFloor <= float64(v.floor) {
				c.rateFloor = 0
			}
		default:
			v.limit = c.from
			c.wait = min(max(c.wait, climbEvery)*2, climbMost)
		}
		if c.rateFloor > 0 {
			c.nextDown = !c.nextDown
		}
	default:
		if !busy || (grew && v.slowStart) { // a try is judged against a rate that slow start does not move
			c.busyEpochs = 0
			return
		}
		c.busyEpochs++
		c.prev, c.last = c.last, rate
		if c.busyEpochs < max(c.wait, climbEvery) {
			return
		}
		c.busyEpochs = 0
		up := !(c.rateFloor > 0 && c.nextDown)
		next := v.limit * climbStep
		if !up {
			next = v.limit / climbStep
		}
		next = math.Min(math.Max(next, float64(v.floor)), float64(v.ceiling))
		if int(next) == v.current() {
			c.nextDown = !c.nextDown && c.rateFloor > 0
			return
		}
		c.phase, c.up, c.from, c.before, v.limit = climbSettle, up, v.limit, (c.prev+c.last)/2, next
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
	v.size = v.roundSize()
	return v.current()
}

// window is a lane's in-flight limit: one unit per queued or written publishing, as many at most as the
// Router's limiter allows (or Config.Window, fixed). A limit that shrinks below what is in flight lets no
// new publishing in until enough are confirmed; it never takes back what is in flight.
type window struct {
	units *budget
	l     *limiter // nil: fixed
}

// limiter is the adaptive in-flight limit of a Router (Config.AdaptiveWindow): one vegas fed by the
// confirms of every lane, whose limit is each lane's. One limit for all lanes, not one each: the lanes
// share one broker and one dispatcher, which waits whenever the lane of the next event is full, so a
// lane's rate depends on the other lanes' limits as much as on its own; a lane that tried a larger limit
// alone would see no more rate from it, and the climb (see vegas) would never find a batching broker's.
type limiter struct {
	mu    sync.Mutex
	v     *vegas
	lanes []*budget
}

func newLimiter(ceiling int) *limiter { return &limiter{v: newVegas(ceiling)} }

func newWindow(ceiling int, l *limiter) *window {
	w := &window{units: newBudget(ceiling), l: l}
	if l != nil {
		l.mu.Lock()
		w.units.max = l.v.current()
		l.lanes = append(l.lanes, w.units)
		l.v.lanes = len(l.lanes)
		l.v.size = l.v.roundSize()
		l.mu.Unlock()
	}
	return w
}

// acquire takes a unit, waiting while the lane is at its limit; errors as budget.acquire.
func (w *window) acquire(ctx context.Context, failed <-chan struct{}) error {
	return w.units.acquire(ctx, failed, 1)
}

// release gives a unit back.
func (w *window) release() { w.units.release(1) }

// confirmed takes the time and round trip of one confirm of the lane and adapts the limit of every lane;
// called by the lanes' confirmLoops.
func (w *window) confirmed(at time.Time, rtt time.Duration) {
	if w.l == nil {
		return
	}
	used, _ := w.units.usage()
	w.l.mu.Lock()
	defer w.l.mu.Unlock()
	was := w.l.v.current()
	n := w.l.v.sample(at, rtt, used)
	if n == was {
		return
	}
	for _, b := range w.l.lanes {
		b.adjust(func(int) int { return n })
	}
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
