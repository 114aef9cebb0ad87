package inbox_test

import (
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
)

// Pruned rows stay blocked by the version watermark: a redelivery is Stale, never applied again; a
// parked event is never pruned.
func TestPruneKeepsDuplicatesBlocked(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e1, e2, e4 := order("42", 1, 10), order("42", 2, 20), order("42", 4, 40)
	for _, ev := range []inbox.Event{e1, e2, e4} {
		if _, err := p.Process(l.Ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	n, err := p.Prune(l.Ctx, time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "pruned", n, 2)
	want(t, "parked row kept", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1 AND status = 'parked'`, e4.ID), 1)
	res, err := p.Process(l.Ctx, e1)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "redelivered pruned E1", res.Outcome, inbox.Stale)
	want(t, "amount", l.Amount("42"), 30)
	summary(t, "inbox=3 pruned=%d kept=parked:1 redelivered-E1=%v applied=%d amount=%d", n, res.Outcome, l.Handled.Load(), l.Amount("42"))
}
