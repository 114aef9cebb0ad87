package route

import (
	"context"
	"testing"
	"time"
)

// queueModel models a lane's confirm round trip: base while at most knee messages are in flight, plus perMsg
// for each one beyond (they wait in the broker's queue).
type queueModel struct {
	base   time.Duration
	knee   int
	perMsg time.Duration
}

func (b queueModel) rtt(inflight int) time.Duration {
	return b.base + time.Duration(max(0, inflight-b.knee))*b.perMsg
}

// batchModel models a broker that writes what arrived during its last write in one write of fixed cost
// plus perMsg a message (a quorum queue's Raft log): a message waits for the write in progress and its
// own, so the round trip grows with what is in flight, and so does the rate, towards 1/perMsg.
type batchModel struct {
	fixed, perMsg time.Duration
}

func (b batchModel) rtt(inflight int) time.Duration {
	return b.fixed + time.Duration(inflight)*b.perMsg
}

type model interface {
	rtt(inflight int) time.Duration
}

// rate is the confirms per second of a lane that keeps inflight messages in flight at b.
func rate(b model, inflight int) float64 { return float64(inflight) / b.rtt(inflight).Seconds() }

// clock is a lane's time in a test: each confirm comes rtt/inflight after the one before it, as with
// inflight messages in flight at a steady round trip.
type clock struct{ at time.Time }

func newClock() *clock { return &clock{at: time.Unix(1e9, 0)} }

func (c *clock) sample(v *vegas, rtt time.Duration, inflight int) int {
	c.at = c.at.Add(max(rtt/time.Duration(max(inflight, 1)), time.Nanosecond))
	return v.sample(c.at, rtt, inflight)
}

// drive runs a lane that always has demand messages to send against b for n samples, and returns the
// limit at the end and the least and most limit over the last half, leaving out the probes (the limit at
// the floor for a round every probeRounds rounds).
func drive(v *vegas, c *clock, b model, demand, n int) (last, lo, hi int) {
	limit := v.current()
	lo, hi = limit, limit
	for i := 0; i < n; i++ {
		inflight := min(limit, demand)
		limit = c.sample(v, b.rtt(inflight), inflight)
		if v.probing || v.climb.phase != climbSteady { // a probe, or a try of the climb
			continue
		}
		if i < n/2 {
			lo, hi = limit, limit
		}
		lo, hi = min(lo, limit), max(hi, limit)
	}
	return limit, lo, hi
}

func TestVegasFollowsTheBroker(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ceiling int
		b       queueModel
		demand  int
		lo, hi  int // the limit over the last half of the run stays within
	}{
		{"flat round trip grows to the ceiling", 512, queueModel{base: time.Millisecond, knee: 1 << 20}, 1 << 20, 512, 512},
		{"a far broker, flat round trip, grows to the ceiling", 512, queueModel{base: 2 * time.Millisecond, knee: 1 << 20}, 1 << 20, 512, 512},
		{"a queue from 64 in flight holds the limit near the knee", 512, queueModel{base: time.Millisecond, knee: 64, perMsg: 50 * time.Microsecond}, 1 << 20, 56, 96},
		{"a queue from 8 in flight", 512, queueModel{base: 500 * time.Microsecond, knee: 8, perMsg: 100 * time.Microsecond}, 1 << 20, 8, 24},
		{"a rate that needs 3 in flight does not grow the limit", 512, queueModel{base: time.Millisecond, knee: 1 << 20}, 3, 4, 16},
		{"a small ceiling is kept", 8, queueModel{base: time.Millisecond, knee: 1 << 20}, 1 << 20, 8, 8},
		{"a ceiling under the floor is the limit", 2, queueModel{base: time.Millisecond, knee: 0, perMsg: time.Millisecond}, 1 << 20, 2, 2},
		{"a queue from the first message keeps the floor", 512, queueModel{base: time.Millisecond, knee: 0, perMsg: time.Millisecond}, 1 << 20, 4, 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, lo, hi := drive(newVegas(tc.ceiling), newClock(), tc.b, tc.demand, 200_000)
			if lo < tc.lo || hi > tc.hi {
				t.Errorf("limit over the last half between %d and %d, want within [%d, %d]", lo, hi, tc.lo, tc.hi)
			}
		})
	}
}

func TestVegasShrinksWhenTheBrokerSlowsAndGrowsWhenItRecovers(t *testing.T) {
	v, c := newVegas(512), newClock()
	fast := queueModel{base: time.Millisecond, knee: 1 << 20}
	if got, _, _ := drive(v, c, fast, 1<<20, 20_000); got != 512 {
		t.Fatalf("limit %d with a flat round trip, want 512", got)
	}
	// The broker starts to queue from 32 in flight (a classic queue taking its disk path).
	slow := queueModel{base: time.Millisecond, knee: 32, perMsg: 200 * time.Microsecond}
	rounds := 0
	for limit := v.current(); limit > 64; rounds++ {
		for i := 0; i < limit; i++ {
			c.sample(v, slow.rtt(limit), limit)
		}
		limit = v.current()
	}
	if rounds > 6 {
		t.Errorf("took %d rounds to shrink from 512 to 64 or less, want at most 6 (half at most per round)", rounds)
	}
	got, _, hi := drive(v, c, slow, 1<<20, 50_000)
	t.Logf("rate floor %.0f, phase %d, limit %d", v.climb.rateFloor, v.climb.phase, got)
	if got < 32 || hi > 48 {
		t.Errorf("limit %d (at most %d over the last half) with a knee at 32, want 32 to 48", got, hi)
	}
	if got, _, _ := drive(v, c, fast, 1<<20, 200_000); got != 512 {
		t.Errorf("limit %d once the broker recovered, want 512", got)
	}
}

// TestClimbFindsTheRateOfABatchingBroker: a broker that writes what arrived in one write (a quorum
// queue) confirms more the more is in flight; Vegas alone reads the longer round trip as a queue and keeps
// a fraction of the rate (36 in flight here: 0.31 of the ceiling's rate; the router's median on a real
// quorum queue was 0.51 of the best fixed window without the climb); with it the lane reaches 0.9 of the
// rate at the ceiling (0.93 and 0.92 when written) and stays there. A broker whose rate does not grow past
// a knee (a queue) keeps the limit near the knee.
func TestClimbFindsTheRateOfABatchingBroker(t *testing.T) {
	for _, tc := range []struct {
		name     string
		b        model
		ceiling  int
		least    float64 // the least share of the ceiling's rate over the last half
		most     int     // the most limit over the last half, tries left out
		leastLim int
	}{
		{"a Raft log: 2 ms a write, 20 µs a message", batchModel{fixed: 2 * time.Millisecond, perMsg: 20 * time.Microsecond}, 512, 0.9, 512, 300},
		{"a slower disk: 5 ms a write, 40 µs a message", batchModel{fixed: 5 * time.Millisecond, perMsg: 40 * time.Microsecond}, 2048, 0.88, 2048, 600},
		{"a queue from 64 (rate flat past the knee)", queueModel{base: time.Millisecond, knee: 64, perMsg: time.Millisecond / 64}, 512, 0, 140, 56},
		{"a queue that slows past 32 (a classic queue's disk path)", queueModel{base: time.Millisecond, knee: 32, perMsg: 200 * time.Microsecond}, 512, 0, 48, 24},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, c := newVegas(tc.ceiling), newClock()
			var samples int
			var spent time.Duration
			limit := v.current()
			for i := 0; i < 1_600_000; i++ {
				before := c.at
				limit = c.sample(v, tc.b.rtt(limit), limit)
				if i >= 800_000 {
					samples++
					spent += c.at.Sub(before)
				}
			}
			got := float64(samples) / spent.Seconds()
			best := rate(tc.b, tc.ceiling)
			_, lo, hi := drive(v, c, tc.b, 1<<20, 100_000)
			t.Logf("rate %.0f/s over the last half, %.2f of the ceiling's %.0f/s; limit %d..%d (tries left out), rate floor %.0f",
				got, got/best, best, lo, hi, v.climb.rateFloor)
			if got < tc.least*best {
				t.Errorf("rate %.0f/s, want at least %.2f of the ceiling's %.0f/s", got, tc.least, best)
			}
			if hi > tc.most || lo < tc.leastLim {
				t.Errorf("limit %d..%d, want within [%d, %d]", lo, hi, tc.leastLim, tc.most)
			}
		})
	}
}

func TestVegasLearnsAFurtherBroker(t *testing.T) {
	// A base measured against a near broker would read every round trip of a far one as a queue; the
	// probe doubles base every probeRounds rounds until it matches.
	v, c := newVegas(512), newClock()
	drive(v, c, queueModel{base: 200 * time.Microsecond, knee: 1 << 20}, 1<<20, 20_000)
	far := queueModel{base: 4 * time.Millisecond, knee: 1 << 20}
	if got, _, _ := drive(v, c, far, 1<<20, 2_000_000); got != 512 {
		t.Errorf("limit %d against a broker 20 times further and a flat round trip, want 512", got)
	}
}

func FuzzVegasStaysWithinItsBounds(f *testing.F) {
	f.Add(512, []byte{1, 2, 3, 200, 255, 0, 7})
	f.Add(1, []byte{0, 0, 0})
	f.Add(65536, []byte{255, 1, 255, 1})
	f.Fuzz(func(t *testing.T, ceiling int, trips []byte) {
		if ceiling < 1 || ceiling > maxWindow {
			return
		}
		v := newVegas(ceiling)
		floor := min(vegasFloor, ceiling)
		at := time.Unix(1e9, 0)
		for i, b := range trips {
			for j := 0; j < 1+int(b)%7; j++ {
				rtt := time.Duration(b) * time.Duration(b) * time.Microsecond // 0 included
				at = at.Add(time.Duration(b) * time.Millisecond)              // epochs of every length; the clock may stand still
				got := v.sample(at, rtt, (i*31+j)%(ceiling+1))
				if got < floor || got > ceiling {
					t.Fatalf("limit %d outside [%d, %d]", got, floor, ceiling)
				}
			}
		}
	})
}

func TestVegasProbeMeasuresTheNoLoadRoundTripAndGivesTheLimitBack(t *testing.T) {
	// A broker that queues from 8 in flight: base measured in the first round (16 in flight) is too high
	// until the first probe takes it at the floor.
	b := queueModel{base: 500 * time.Microsecond, knee: 8, perMsg: 100 * time.Microsecond}
	v, c := newVegas(512), newClock()
	drive(v, c, b, 1<<20, 100)
	if v.base != b.rtt(16) {
		t.Fatalf("base %s after the first rounds, want the round trip at 16 in flight, %s", v.base, b.rtt(16))
	}
	probes, before := 0, 0
	for i := 0; i < 100_000; i++ {
		was := v.probing
		limit := v.current()
		inflight := limit
		c.sample(v, b.rtt(inflight), inflight)
		switch {
		case !was && v.probing:
			probes++
			before = int(v.resume)
			if v.current() != vegasFloor {
				t.Fatalf("limit %d during a probe, want the floor %d", v.current(), vegasFloor)
			}
		case was && !v.probing:
			if v.current() != before {
				t.Fatalf("limit %d after a probe, want %d as before it", v.current(), before)
			}
			if v.base != b.rtt(vegasFloor) {
				t.Fatalf("base %s after a probe, want the round trip at the floor, %s", v.base, b.rtt(vegasFloor))
			}
		}
	}
	if probes == 0 {
		t.Fatal("no probe in 100,000 samples")
	}
}

func TestWindowLetsInAsManyAsItsLimit(t *testing.T) {
	ctx := context.Background()
	never := make(chan struct{})
	w := newWindow(64, newLimiter(64))
	if got := w.limit(); got != vegasInitial {
		t.Fatalf("limit %d at the start, want %d", got, vegasInitial)
	}
	for i := 0; i < vegasInitial; i++ {
		if err := w.acquire(ctx, never); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan error, 1)
	go func() { got <- w.acquire(ctx, never) }()
	select {
	case err := <-got:
		t.Fatalf("acquire past the limit returned %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	// One round of flat round trips with the window full: slow start doubles the limit, which lets the
	// waiting acquire in without any release.
	for i := 0; i < vegasInitial; i++ {
		w.confirmed(time.Now(), time.Millisecond)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if got := w.limit(); got != 2*vegasInitial {
		t.Fatalf("limit %d after a flat round, want %d", got, 2*vegasInitial)
	}
	// Round trips ten times the base: the limit shrinks below what is in flight (17), and no acquire gets
	// in until enough are released.
	for i := 0; i < 2*vegasInitial; i++ {
		w.confirmed(time.Now(), 10*time.Millisecond)
	}
	limit := w.limit()
	if limit >= vegasInitial+1 {
		t.Fatalf("limit %d after a round at ten times the base round trip, want under the %d in flight", limit, vegasInitial+1)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := w.acquire(short, never); err == nil {
		t.Fatal("acquire succeeded while more than the limit was in flight")
	}
	for i := 0; i < vegasInitial+1-limit+1; i++ {
		w.release()
	}
	if err := w.acquire(ctx, never); err != nil {
		t.Fatal(err)
	}
	if fixed := newWindow(64, nil); fixed.limit() != 64 {
		t.Fatalf("a fixed window's limit is %d, want 64", fixed.limit())
	}
}

// TestLimiterGivesEveryLaneTheLimit: the confirms of one lane move the limit of every lane of the Router
// (the dispatcher waits on whichever lane is full, so the lanes' limits move together), and a round counts
// the confirms of all lanes.
func TestLimiterGivesEveryLaneTheLimit(t *testing.T) {
	l := newLimiter(512)
	a, b := newWindow(512, l), newWindow(512, l)
	if a.limit() != vegasInitial || b.limit() != vegasInitial || l.v.roundSize() != 2*vegasInitial {
		t.Fatalf("limits %d and %d, round %d at the start; want %d, %d and %d", a.limit(), b.limit(), l.v.roundSize(),
			vegasInitial, vegasInitial, 2*vegasInitial)
	}
	at := time.Unix(1e9, 0)
	for i := 0; i < 2*vegasInitial; i++ { // one round of flat round trips, all on lane a, a full window
		for a.units.tryAcquire(1) {
		}
		at = at.Add(time.Millisecond)
		a.confirmed(at, time.Millisecond)
	}
	if a.limit() != 2*vegasInitial || b.limit() != 2*vegasInitial {
		t.Fatalf("limits %d and %d after a flat round on lane a, want both %d (slow start)", a.limit(), b.limit(), 2*vegasInitial)
	}
}
