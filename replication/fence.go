package replication

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Fence keeps a router that may have lost its slot from writing to RabbitMQ (route.Config.Fence; ADR 0010).
// A run holds the slot's lock on the session of its replication connection (slotLock.moveTo), which
// PostgreSQL ends --lease after the last word it had from the router (wal_sender_timeout, which the run sets
// to --lease on that connection): a paused router loses the lock, and the router standing by takes the slot,
// within --lease and its next attempt. The Fence is the router's side of that bound, counted on its own
// clock: each run's lock holds for it
//
//   - from the moment the run asked for the lock, for half of --lease;
//   - renewed by each status update the stream sends (sent), for half of --lease from when it was sent, as
//     long as the lease still held then: PostgreSQL got that update no earlier than it was sent, so the
//     walsender lives at least --lease past it; half of it is left for the network and the clocks;
//   - renewed by PostgreSQL's answer to a request sent on the lock's session, or its word that the session
//     holds the lock (grant: START_REPLICATION, the initial snapshot's lease checks), whatever came before.
//
// It breaks, and stays broken until the next run takes the lock, once the lease passed without a renewal
// (the stream sent nothing for half of --lease: a wait on PostgreSQL, a wedged session), or once the process
// was held up for longer than a quarter of --lease, at most a second (a SIGSTOP, a debugger, a stalled
// virtual machine or a machine too loaded to run it): its session may have been ended meanwhile and the
// slot taken over, which only a new lock tells. The process's own running is seen by a tick every
// fenceTick (watch) and by every use of the Fence; a gap is measured on the monotonic clock and on the wall
// clock, whichever says more (a suspended machine's monotonic clock may stand still).
//
// A broken, expired or idle (no run holds the lock) Fence says no to every write: the Router fails with its
// error, and the stream restarts from the acknowledged position, takes the lock again or stands by. A nil
// Fence fences nothing.
type Fence struct {
	lease time.Duration
	now   func() time.Time

	mu     sync.Mutex
	active bool      // a run holds the lock (begin, end)
	until  time.Time // writes may go before this
	seen   time.Time // when the process was last seen running
	broken error     // why no write goes until the next run's begin
}

// DefaultLease is run's --lease: a paused router keeps its slot at most this long.
const DefaultLease = 10 * time.Second

// fenceTick is how often a running process notes that it runs (Fence.watch).
const fenceTick = 100 * time.Millisecond

// NewFence returns the Fence of a router whose slot's lock PostgreSQL ends lease after the router's last word;
// nil (no fence, no wal_sender_timeout of the router's own) for a lease of 0.
func NewFence(lease time.Duration) *Fence {
	if lease <= 0 {
		return nil
	}
	return &Fence{lease: lease, now: time.Now}
}

// Lease is the fence's lease, 0 for a nil Fence.
func (f *Fence) Lease() time.Duration {
	if f == nil {
		return 0
	}
	return f.lease
}

// valid is how long a renewal lets the router write (0 for a nil Fence); jump the longest gap in the
// process's running that is not a pause.
func (f *Fence) valid() time.Duration {
	if f == nil {
		return 0
	}
	return f.lease / 2
}

func (f *Fence) jump() time.Duration { return min(time.Second, f.lease/4) }

// errFenced is wrapped by every error of Check: the stream counts such a restart as PostgreSQL's (the slot's
// lease), not the broker's, although the Router reports it.
var errFenced = errors.New("the router stopped writing to RabbitMQ")

// Check implements route.Fence: nil while the run's lock holds; otherwise why not, wrapping errFenced.
func (f *Fence) Check() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	now := f.now()
	f.observe(now)
	switch {
	case !f.active:
		return fmt.Errorf("%w: the run that held the slot's lock has ended", errFenced)
	case f.broken != nil:
		return f.broken
	case !now.Before(f.until):
		f.broken = fmt.Errorf("%w: it has not told PostgreSQL that it runs for %v, half of --lease (%v), and PostgreSQL "+
			"ends the session that holds the slot's lock --lease after the router's last word, so the router standing by "+
			"may take the slot over; it takes the slot again or stands by", errFenced,
			elapsed(f.until.Add(-f.valid()), now).Round(time.Millisecond), f.lease)
		return f.broken
	}
	return nil
}

// Broken implements route.Fence: the error that broke the run's hold (a pause, a lapsed lease), nil while it
// holds and while no run holds the lock (a standby's probe of the broker writes freely).
func (f *Fence) Broken() error {
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observe(f.now())
	if !f.active {
		return nil
	}
	return f.broken
}

// observe notes that the process runs at now, and breaks the fence of a run when the gap since it was last
// seen running is longer than jump.
func (f *Fence) observe(now time.Time) {
	if gap := elapsed(f.seen, now); f.active && f.broken == nil && !f.seen.IsZero() && gap > f.jump() {
		f.broken = fmt.Errorf("%w: the router was held up for %v (a paused process, a debugger, a stalled virtual machine "+
			"or a machine too loaded to run it), long enough for PostgreSQL to have ended its session and for the router "+
			"standing by to have taken the slot over; it takes the slot again or stands by", errFenced, gap.Round(time.Millisecond))
	}
	if f.seen.IsZero() || elapsed(f.seen, now) > 0 {
		f.seen = now
	}
}

// elapsed is the time from a to b on the monotonic clock, or on the wall clock when that says more.
func elapsed(a, b time.Time) time.Duration {
	return max(b.Sub(a), b.Round(0).Sub(a.Round(0)))
}

// begin starts a run's hold: the run asked for the lock at at, and got it.
func (f *Fence) begin(at time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active, f.broken, f.seen = true, nil, f.now()
	f.until = at.Add(f.valid())
}

// end ends the run's hold: no write goes until the next begin.
func (f *Fence) end() {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.active = false
}

// grant renews the lease for d from at: PostgreSQL answered a request sent at at on the lock's session, or
// said that the session holds the lock. It renews a lease that lapsed, not a broken one.
func (f *Fence) grant(at time.Time, d time.Duration) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observe(f.now())
	if f.active && f.broken == nil && at.Add(d).After(f.until) {
		f.until = at.Add(d)
	}
}

// sent renews the lease from at, when the stream sent a status update on the replication connection, if the
// lease held then.
func (f *Fence) sent(at time.Time) {
	if f == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.observe(f.now())
	if !f.active || f.broken != nil || !at.Before(f.until) {
		return // a lapsed lease is not renewed by a word PostgreSQL may no longer hear: Check breaks it
	}
	if u := at.Add(f.valid()); u.After(f.until) {
		f.until = u
	}
}

// watch notes every fenceTick that the process runs, until ctx ends.
func (f *Fence) watch(ctx context.Context) {
	if f == nil {
		return
	}
	t := time.NewTicker(fenceTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f.mu.Lock()
			f.observe(f.now())
			f.mu.Unlock()
		}
	}
}
