package cdc

import (
	"errors"
	"fmt"
	"time"
)

// StrikesToQuarantine is how many times in a row the broker must refuse an event, while it was the only
// message in flight, before the event is quarantined (and, for a refusal the broker's state can end,
// only once Refusals.Period has passed since the first of them).
const StrikesToQuarantine = 3

// DefaultRefusalRetry is the default of Refusals.Period: how long a return or a nack of one event is
// retried before the event is quarantined.
const DefaultRefusalRetry = 5 * time.Minute

// PerMessage reports whether err is a publisher failure that one message can cause, so that the message
// is found by publishing one event at a time: its error (route.ClosedError, route.PublishError) has a
// PerMessage method that says so.
func PerMessage(err error) bool {
	var pm interface{ PerMessage() bool }
	return errors.As(err, &pm) && pm.PerMessage()
}

// Permanent reports whether err is a publisher failure that no retry can end, only a human (a 403 on the
// router's own exchange: its user lost write permission): its error has a Permanent method that says so.
// The stream stops on it with the error's fix instead of restarting.
func Permanent(err error) bool {
	var p interface{ Permanent() bool }
	return errors.As(err, &p) && p.Permanent()
}

// BrokerState reports whether err is a refusal that the broker's state rather than the message may cause
// and end (a return because no binding matched, a nack from a full queue): its error has a BrokerState
// method that says so. Such a refusal is retried for Refusals.Period before it condemns its event.
func BrokerState(err error) bool {
	var bs interface{ BrokerState() bool }
	return errors.As(err, &bs) && bs.BrokerState()
}

// Refusals counts, per event id, the per-message refusals of an event while it was the only message in
// flight, so that a publisher (the stream's safety net, a snapshot's copy) quarantines the one event the
// broker keeps refusing instead of failing forever. The zero value is not usable: use NewRefusals.
type Refusals struct {
	// Period is how long a refusal that the broker's state may end (BrokerState) is retried after its
	// first strike before it condemns the event; 0 means DefaultRefusalRetry.
	Period  time.Duration
	now     func() time.Time
	strikes map[string]strike
}

// strike is the record of one event's refusals while it was alone in flight.
type strike struct {
	n           int
	first, last time.Time
	reason      string
	state       bool // the last refusal was one the broker's state may end
}

// NewRefusals returns an empty record with the given period (0: DefaultRefusalRetry).
func NewRefusals(period time.Duration) *Refusals {
	if period <= 0 {
		period = DefaultRefusalRetry
	}
	return &Refusals{Period: period, now: time.Now, strikes: map[string]strike{}}
}

// Strike records err, a per-message refusal (PerMessage), against id, the event that was alone in flight.
// Errors of any other kind are ignored: they neither count nor forgive.
func (r *Refusals) Strike(id string, err error) {
	if id == "" || !PerMessage(err) {
		return
	}
	st, ok := r.strikes[id]
	if !ok {
		st.first = r.now()
	}
	st.n++
	st.last = r.now()
	st.reason, st.state = err.Error(), BrokerState(err)
	r.strikes[id] = st
}

// Condemned returns the broker's last refusal of id, with how long and how often it was tried, once id was
// refused StrikesToQuarantine times in a row while alone in flight and, for a refusal the broker's state
// may end, the last of them came Period or more after the first: the broker still refused it when the
// period was over. Time alone does not condemn: an event whose publisher was kept from it by something
// else (a PostgreSQL restart, an alarm) after its last refusal is tried again first, since the broker's
// state may have changed meanwhile (the chaos harness's seed 583: a queue-length policy cleared 20 s
// before the event was quarantined without a new try).
func (r *Refusals) Condemned(id string) (string, bool) {
	st, ok := r.strikes[id]
	if !ok || st.n < StrikesToQuarantine {
		return "", false
	}
	if !st.state {
		return st.reason, true
	}
	refused := st.last.Sub(st.first)
	if refused < r.Period {
		return "", false
	}
	return fmt.Sprintf("%s (retried %d times over %s)", st.reason, st.n, refused.Round(time.Second)), true
}

// Struck returns how often id was refused while alone in flight, and since when.
func (r *Refusals) Struck(id string) (n int, since time.Time) {
	st := r.strikes[id]
	return st.n, st.first
}

// Clear forgets the strikes of an event the broker confirmed.
func (r *Refusals) Clear(id string) { delete(r.strikes, id) }

// Restore replaces the record with one event's strikes as another record kept them (the slot's stored
// record, which a router's earlier runs and the other router of its slot write): n strikes, the first and
// the last at first and last, the last refusal's words and whether the broker's state may end it. n <= 0
// leaves the record empty.
func (r *Refusals) Restore(id string, n int, first, last time.Time, reason string, state bool) {
	clear(r.strikes)
	if id == "" || n <= 0 {
		return
	}
	r.strikes[id] = strike{n: n, first: first, last: last, reason: reason, state: state}
}
