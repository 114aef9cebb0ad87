package inbox_test

import (
	"testing"

	"github.com/cdc-router/cdc-router/inbox"
)

// Scenario 3, policy Park: E2 arrives before E1. E2 is parked and acknowledged without effect; E1 closes
// the gap and E2 is applied in the same transaction. Neither is applied twice when redelivered.
func TestIncrementalGapParkedThenApplied(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{OnGap: inbox.Park})
	e1, e2, e3 := order("42", 1, 10), order("42", 2, 20), order("42", 3, 30)
	for _, ev := range []inbox.Event{e3, e2, e1, e2} {
		l.Publish(ev)
	}
	ch := l.Channel()
	var got []inbox.Result
	for range 4 {
		d := l.Get(ch)
		got = append(got, l.Process(p, d))
		d.Ack(false)
		if len(got) == 2 {
			want(t, "amount while parked", l.Amount("42"), 0)
			want(t, "parked rows", l.Count(`SELECT count(*) FROM inbox.parked`), 2)
			want(t, "parked inbox rows", l.Count(`SELECT count(*) FROM inbox.inbox WHERE status = 'parked'`), 2)
		}
	}
	want(t, "E3", got[0].Outcome, inbox.Parked)
	want(t, "E2", got[1].Outcome, inbox.Parked)
	want(t, "E1", got[2].Outcome, inbox.Applied)
	want(t, "E1 unparked", got[2].Unparked, 2)
	want(t, "version after E1", got[2].Version, 3)
	want(t, "E2 again", got[3].Outcome, inbox.Duplicate)
	want(t, "amount", l.Amount("42"), 60)
	want(t, "parked left", l.Count(`SELECT count(*) FROM inbox.parked`), 0)
	want(t, "applied inbox rows", l.Count(`SELECT count(*) FROM inbox.inbox WHERE status = 'applied'`), 3)
	want(t, "queue", l.Ready(), 0)
	summary(t, "published=4 outcomes=%v,%v,%v(+%d unparked),%v applied=%d inbox=%d parked=0 version=%d amount=%d",
		got[0].Outcome, got[1].Outcome, got[2].Outcome, got[2].Unparked, got[3].Outcome, l.Handled.Load(),
		l.Count(`SELECT count(*) FROM inbox.inbox`), got[2].Version, l.Amount("42"))
}

// Scenario 3, policy Requeue: E2 before E1 rolls back entirely (no inbox row, no effect) and is
// requeued; once E1 is applied the retried E2 applies.
func TestIncrementalGapRequeuedThenRetried(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{OnGap: inbox.Requeue})
	l.Publish(order("42", 2, 20))
	l.Publish(order("42", 1, 10))
	ch := l.Channel()

	d2 := l.Get(ch) // held unacknowledged while E1 is fetched, as a prefetch window would
	r2 := l.Process(p, d2)
	want(t, "E2 first", r2.Outcome, inbox.Gap)
	want(t, "inbox rows after the gap", l.Count(`SELECT count(*) FROM inbox.inbox`), 0)
	d1 := l.Get(ch)
	r1 := l.Process(p, d1)
	d1.Ack(false)
	want(t, "E1", r1.Outcome, inbox.Applied)
	if err := d2.Nack(false, true); err != nil {
		t.Fatal(err)
	}
	d2 = l.Get(ch)
	want(t, "E2 redelivered", d2.Redelivered, true)
	retry := l.Process(p, d2)
	d2.Ack(false)
	want(t, "E2 retried", retry.Outcome, inbox.Applied)
	want(t, "amount", l.Amount("42"), 30)
	want(t, "queue", l.Ready(), 0)
	summary(t, "published=2 deliveries=3 outcomes=%v,%v,%v applied=%d inbox=%d version=%d amount=%d",
		r2.Outcome, r1.Outcome, retry.Outcome, l.Handled.Load(), l.Count(`SELECT count(*) FROM inbox.inbox`),
		retry.Version, l.Amount("42"))
}

// A parked event its handler rejects as permanent goes to the failed table when its gap closes; the
// event that closed the gap still applies.
func TestParkedEventFailingPermanentlyKeepsTheGapCloser(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e1, e2 := order("42", 1, 10), order("42", 2, 20)
	e2.Payload = []byte(`not json`)
	var got []inbox.Result
	for _, ev := range []inbox.Event{e2, e1} {
		res, err := p.Process(l.Ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res)
	}
	want(t, "E2", got[0].Outcome, inbox.Parked)
	want(t, "E1", got[1].Outcome, inbox.Applied)
	want(t, "E1 unparked", got[1].Unparked, 0)
	want(t, "version", got[1].Version, 1)
	want(t, "amount", l.Amount("42"), 10)
	want(t, "parked left", l.Count(`SELECT count(*) FROM inbox.parked`), 0)
	want(t, "E2 failed", l.Count(`SELECT count(*) FROM inbox.failed WHERE event_id = $1 AND reason = 'permanent'`, e2.ID), 1)
	want(t, "E2 inbox row", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1`, e2.ID), 0)
	summary(t, "outcomes=%v,%v unparked=%d failed=1 version=%d amount=%d",
		got[0].Outcome, got[1].Outcome, got[1].Unparked, got[1].Version, l.Amount("42"))
}
