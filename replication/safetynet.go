package replication

import (
	"context"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/snapshot"
)

// strikesToQuarantine is how many times in a row the broker must refuse one event while it was the only
// message in flight before that event is quarantined (cdc.StrikesToQuarantine; a return or a nack only
// once the refusal period has passed as well).
const strikesToQuarantine = cdc.StrikesToQuarantine

// safetyNet finds the one event the broker keeps refusing in a way the message mapping could not predict,
// and quarantines it instead of restarting the stream forever. After a per-message refusal (cdc.PerMessage:
// a channel close one message can cause, 403 on an exchange of its own, a return from an exchange of its
// own, a nack), the events up to the furthest position received so far are published one at a time, each
// confirmed before the next is written, so a repeated refusal names its event exactly. A close is
// quarantined after strikesToQuarantine strikes; a return or a nack, which a binding or a queue that drains
// may end, only once cdc.Refusals.Period (--refusal-retry) has passed since its first strike as well, the
// restarts backing off meanwhile.
//
// It lives with the slot: the runs record each strike, and the position up to which events go one at a
// time, in the slot's stored record (offsets.Refusal, strike.go), and each run starts from that record
// (adopt), so that the strikes survive a restart of the process and a takeover by the other router of the
// slot (seed 9711: with the two taking turns, strikes counted per process never reached three). A strike
// names its event by position and id (offsets.RefusedEvent), so another event never inherits it. Without a
// stored position (nothing to keep the record in) the strikes live in this process, across the runs of
// one Run.
type safetyNet struct {
	until    cdc.LSN              // events at or before this WAL position are published one at a time
	received cdc.LSN              // the furthest WAL position the current stream run decoded
	alone    offsets.RefusedEvent // the event that is the only message in flight, while one is
	strikes  *cdc.Refusals        // keyed by offsets.RefusedEvent.Key
	stored   offsets.RefusedEvent // the event the slot's stored record has strikes for, as last read or written
}

// newSafetyNet returns an empty net whose returns and nacks are retried for period (0: the default).
func newSafetyNet(period time.Duration) *safetyNet {
	return &safetyNet{strikes: cdc.NewRefusals(period)}
}

// failed takes the error that ended a stream run and reports whether it was a per-message refusal, in
// which case the replay up to the furthest received position goes one event at a time. A strike the run
// did not record in the slot's record (strike.go) counts in this process.
func (n *safetyNet) failed(err error) bool {
	alone := n.alone
	n.alone = offsets.RefusedEvent{}
	if !cdc.PerMessage(err) {
		return false
	}
	n.until = max(n.until, n.received)
	n.strikes.Strike(alone.Key(), err)
	return true
}

// adopt takes the slot's stored record, read at the start of a run that streams from start: the position
// up to which events go one at a time, and the strikes of its event unless that event's transaction ended
// before start (acknowledged: published or quarantined). The record replaces the strikes counted so far,
// which it has seen (or another run has since cleared).
func (n *safetyNet) adopt(r offsets.Refusal, start cdc.LSN) {
	n.until = max(n.until, r.Until)
	n.stored = offsets.RefusedEvent{}
	if r.Event.Zero() || r.Event.CommitLSN < start {
		n.strikes.Restore("", 0, time.Time{}, time.Time{}, "", false)
		return
	}
	n.until = max(n.until, r.Event.LSN)
	n.stored = r.Event
	n.strikes.Restore(r.Event.Key(), r.Strikes, r.First, r.Last, r.Reason, r.Settles)
}

// careful reports whether ev is published one at a time.
func (n *safetyNet) careful(ev cdc.Event) bool {
	return n.until != 0 && ev.LSN != 0 && ev.LSN <= n.until
}

// condemned returns the broker's last refusal of ev when it has refused it often and long enough while it
// was alone in flight (cdc.Refusals.Condemned).
func (n *safetyNet) condemned(ev cdc.Event) (string, bool) {
	return n.strikes.Condemned(offsets.Refused(ev).Key())
}

// cleared forgets the strikes of an event the broker confirmed, or that was quarantined; it reports whether
// the slot's stored record has them too.
func (n *safetyNet) cleared(ev offsets.RefusedEvent) (stored bool) {
	n.strikes.Clear(ev.Key())
	if n.stored != ev || ev.Zero() {
		return false
	}
	n.stored = offsets.RefusedEvent{}
	return true
}

// renewable is the Publisher of one stream run: the snapshot's safety net replaces a publisher that a
// per-message refusal failed by a new one (renew), and the stream that follows the snapshot then
// publishes through the new one. Only the run's goroutine calls renew, never while the stream publishes.
type renewable struct {
	Publisher
	dial Dialer
}

// renew closes the failed publisher and dials a new one.
func (p *renewable) renew(ctx context.Context) (snapshot.Publisher, error) {
	_ = p.Publisher.Close()
	next, err := p.dial(ctx)
	if err != nil {
		return nil, caused(metrics.CauseBroker, err)
	}
	p.Publisher = next
	return p, nil
}

// unroutableDepth is satisfied by a publisher that can count the messages in its unroutable queue
// (route.Router), which the initial snapshot reports on.
type unroutableDepth interface {
	UnroutableMessages() (n int, ok bool)
}

// UnroutableMessages forwards to the current publisher (unroutableDepth).
func (p *renewable) UnroutableMessages() (int, bool) {
	if d, ok := p.Publisher.(unroutableDepth); ok {
		return d.UnroutableMessages()
	}
	return 0, false
}
