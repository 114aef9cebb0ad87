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

// Prune deletes the repair requests answered before the cutoff and keeps an open one: without it,
// inbox.requests grows by one row per `cdc-router inbox retry|resolve` for ever.
func TestPruneDeletesAnsweredRequestsOnly(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e4, e7 := order("42", 4, 40), order("43", 7, 70)
	for _, ev := range []inbox.Event{e4, e7} {
		if res, err := p.Process(l.Ctx, ev); err != nil || res.Outcome != inbox.Parked {
			t.Fatalf("Process %s = %v, %v; want parked", ev.ID, res.Outcome, err)
		}
	}
	admin, err := inbox.NewAdmin(l.Ctx, l.DB, inbox.Config{Consumer: "orders-projection"})
	if err != nil {
		t.Fatal(err)
	}
	answered, err := admin.Request(l.Ctx, inbox.Request{Action: "resolve", Kind: "parked", Target: e4.ID})
	if err != nil {
		t.Fatal(err)
	}
	if served, err := p.ServeRequest(l.Ctx); !served || err != nil {
		t.Fatalf("ServeRequest = %v, %v", served, err)
	}
	if st, err := admin.State(l.Ctx, answered); err != nil || !st.Done {
		t.Fatalf("request %d = %+v, %v; want done", answered, st, err)
	}
	open, err := admin.Request(l.Ctx, inbox.Request{Action: "retry", Kind: "parked", Target: e7.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Prune(l.Ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	want(t, "requests after a prune with an old cutoff", l.Count(`SELECT count(*) FROM inbox.requests`), 2)
	if _, err := p.Prune(l.Ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	want(t, "answered request pruned", l.Count(`SELECT count(*) FROM inbox.requests WHERE id = $1`, answered), 0)
	want(t, "open request kept", l.Count(`SELECT count(*) FROM inbox.requests WHERE id = $1`, open), 1)
}
