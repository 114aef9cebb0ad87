package replication

import (
	"errors"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// strikesToQuarantine is how many times in a row the broker must close the channel or connection with a
// per-message error while one event was the only message in flight before that event is quarantined.
const strikesToQuarantine = 3

// perMessage is satisfied by a publisher error that one message can cause (route.ClosedError: 406, 501,
// 502, 505, 540), as opposed to a transient condition (connection loss, a broker restart, an alarm, a nack
// from a full queue, a confirm timeout), which never counts against an event.
type perMessage interface{ PerMessage() bool }

// safetyNet finds the one event the broker keeps refusing in a way the message mapping could not predict,
// and quarantines it instead of restarting the stream forever. After a per-message refusal, the events up
// to the furthest position received so far are published one at a time, each confirmed before the next is
// written, so a repeated refusal names its event exactly. It lives across the restarts of one Run.
type safetyNet struct {
	until    cdc.LSN // events at or before this WAL position are published one at a time
	received cdc.LSN // the furthest WAL position the current stream run decoded
	alone    string  // the id of the event that is the only message in flight, while one is
	strikes  map[string]strike
}

// strike counts the per-message refusals of one event while it was alone in flight.
type strike struct {
	n      int
	reason string
}

func newSafetyNet() *safetyNet { return &safetyNet{strikes: map[string]strike{}} }

// failed takes the error that ended a stream run and reports whether it was a per-message refusal, in
// which case the replay up to the furthest received position goes one event at a time.
func (n *safetyNet) failed(err error) bool {
	alone := n.alone
	n.alone = ""
	var pm perMessage
	if !errors.As(err, &pm) || !pm.PerMessage() {
		return false
	}
	n.until = max(n.until, n.received)
	if alone != "" {
		st := n.strikes[alone]
		st.n++
		st.reason = err.Error()
		n.strikes[alone] = st
	}
	return true
}

// careful reports whether ev is published one at a time.
func (n *safetyNet) careful(ev cdc.Event) bool {
	return n.until != 0 && ev.LSN != 0 && ev.LSN <= n.until
}

// condemned returns the broker's last refusal of id when it has refused it strikesToQuarantine times in
// a row while it was alone in flight.
func (n *safetyNet) condemned(id string) (string, bool) {
	st := n.strikes[id]
	return st.reason, st.n >= strikesToQuarantine
}

// cleared forgets the strikes of an event the broker confirmed.
func (n *safetyNet) cleared(id string) { delete(n.strikes, id) }
