package inbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/jackc/pgx/v5"
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

// Prune deletes the failed events retried or resolved before the cutoff, and keeps the open ones: a
// resolved failure is history (its skipped or applied inbox row still blocks a redelivery), an open one
// is an operator's work.
func TestPruneDeletesResolvedFailuresOnly(t *testing.T) {
	l, p, evs, f := poisonLab(t)
	l.skipInProjection("42", 3)
	if err := p.ResolveFailed(l.Ctx, f.ID, "approved"); err != nil {
		t.Fatal(err)
	}
	l.Fault = func(_ context.Context, _ pgx.Tx, ev inbox.Event) error {
		return inbox.Permanent(errors.New("rule 8 rejects this order"))
	}
	open := order("43", 1, 10)
	want(t, "another order's v1", l.processOK(p, open).Outcome, inbox.Failed)
	want(t, "failures before a prune", l.Count(`SELECT count(*) FROM inbox.failed`), 2)
	if _, err := p.Prune(l.Ctx, time.Now().Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	want(t, "failures after a prune with an old cutoff", l.Count(`SELECT count(*) FROM inbox.failed`), 2)
	if _, err := p.Prune(l.Ctx, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	want(t, "resolved failure pruned", l.Count(`SELECT count(*) FROM inbox.failed WHERE id = $1`, f.ID), 0)
	want(t, "open failure kept", l.Count(`SELECT count(*) FROM inbox.failed WHERE event_id = $1`, open.ID), 1)
	l.Fault = nil
	want(t, "the resolved event redelivered after the prune", l.processOK(p, evs[2]).Outcome, inbox.Stale)
	want(t, "amount unchanged by the redelivery", l.Amount("42"), 120)
}
