package inbox_test

import (
	"testing"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

// A full-state event applies across a gap: the parked deltas at or below it become stale, those after
// it apply in order, and a late delta or an older full state below it is Stale. Deltas keep parking
// behind a gap. The full_state header arrives through RabbitMQ as the router sends it (a boolean).
func TestFullStateClosesAGap(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	want(t, "delta v1", l.processOK(p, order("42", 1, 10)).Outcome, inbox.Applied)
	d3, d5 := order("42", 3, 1000), order("42", 5, 5)
	want(t, "delta v3 behind the gap at v2", l.processOK(p, d3).Outcome, inbox.Parked)
	want(t, "delta v5", l.processOK(p, d5).Outcome, inbox.Parked)
	want(t, "amount while parked", l.Amount("42"), 10)

	l.Publish(fullState("42", 4, 100))
	ch := l.Channel()
	defer ch.Close()
	d := l.Get(ch)
	ev, err := runner.DecodeDelivery(d)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "decoded full_state", ev.FullState, true)
	res := l.processOK(p, ev)
	want(t, "full state v4 across the gap", res, inbox.Result{Outcome: inbox.Applied, Version: 5, Unparked: 1})
	want(t, "amount = state v4 + delta v5", l.Amount("42"), 105)
	want(t, "parked v3 now stale", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1 AND status = 'stale'`, d3.ID), 1)
	want(t, "parked left", l.Count(`SELECT count(*) FROM inbox.parked`), 0)

	want(t, "late delta v2", l.processOK(p, order("42", 2, 7)).Outcome, inbox.Stale)
	want(t, "older full state v3", l.processOK(p, fullState("42", 3, 1)).Outcome, inbox.Stale)
	want(t, "delta v3 again", l.processOK(p, d3).Outcome, inbox.Duplicate)
	want(t, "amount after late events", l.Amount("42"), 105)
	want(t, "delta v7 behind a gap", l.processOK(p, order("42", 7, 1)).Outcome, inbox.Parked)
	want(t, "delta v6 closes it", l.processOK(p, order("42", 6, 1)), inbox.Result{Outcome: inbox.Applied, Version: 7, Unparked: 1})
	want(t, "final amount", l.Amount("42"), 107)
	if err := d.Ack(false); err != nil {
		t.Fatal(err)
	}
	summary(t, "v1 delta, v3 v5 parked; full state v4 -> applied to 5 (v3 stale, v5 unparked); late v2 and state v3 stale; amount=%d",
		l.Amount("42"))
}

// A full state is the first event a new consumer of an old aggregate can start from, and under policy
// Requeue it applies across the gap instead of being requeued.
func TestFullStateStartsAnAggregateUnderRequeue(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{OnGap: inbox.Requeue})
	want(t, "delta v57 first", l.processOK(p, order("42", 57, 1)).Outcome, inbox.Gap)
	want(t, "full state v56", l.processOK(p, fullState("42", 56, 500)), inbox.Result{Outcome: inbox.Applied, Version: 56})
	want(t, "delta v57 again", l.processOK(p, order("42", 57, 1)).Outcome, inbox.Applied)
	want(t, "amount", l.Amount("42"), 501)
	summary(t, "requeue: v57 gap, full state v56 applied, v57 applied, amount=%d", l.Amount("42"))
}
