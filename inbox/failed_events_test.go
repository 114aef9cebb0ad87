package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// poisonLab is an order whose version 3 of five fails permanently: versions 1 and 2 apply, 3 is in
// failed, 4 and 5 are parked behind it.
func poisonLab(t *testing.T) (*lab, *inbox.Processor, []inbox.Event, inbox.FailedEvent) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	var evs []inbox.Event
	for v := int64(1); v <= 5; v++ {
		evs = append(evs, order("42", v, v*10))
	}
	l.Fault = func(_ context.Context, _ pgx.Tx, ev inbox.Event) error {
		if ev.ID == evs[2].ID {
			return inbox.Permanent(errors.New("rule 7 rejects this order"))
		}
		return nil
	}
	wantOutcomes := []inbox.Outcome{inbox.Applied, inbox.Applied, inbox.Failed, inbox.Parked, inbox.Parked}
	for i, ev := range evs {
		want(t, ev.ID, l.processOK(p, ev).Outcome, wantOutcomes[i])
	}
	failed, err := p.FailedEvents(l.Ctx, 10)
	if err != nil || len(failed) != 1 {
		t.Fatalf("failed events = %+v, %v; want one", failed, err)
	}
	f := failed[0]
	want(t, "failed event", f.Event.ID, evs[2].ID)
	want(t, "reason", f.Reason, "permanent")
	want(t, "trace header kept", f.Event.Headers["trace_id"], "t-1")
	want(t, "commit LSN kept", f.Event.CommitLSN, evs[2].CommitLSN)
	return l, p, evs, f
}

// RetryFailed, once the handler is fixed, applies the failed event and the parked ones behind it in
// one transaction, and marks the record retried.
func TestRetryFailedUnblocksTheAggregate(t *testing.T) {
	l, p, evs, f := poisonLab(t)
	_, err := p.RetryFailed(l.Ctx, f.ID)
	if err == nil {
		t.Fatal("RetryFailed with the handler still broken succeeded")
	}
	again, _ := p.FailedEvents(l.Ctx, 10)
	if len(again) != 1 || again[0].Attempts != 2 {
		t.Fatalf("after a failed retry: %+v, want the record with 2 attempts", again)
	}
	l.Fault = nil
	res, err := p.RetryFailed(l.Ctx, f.ID)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "retry", res, inbox.Result{Outcome: inbox.Applied, Version: 5, Unparked: 2})
	want(t, "amount", l.Amount("42"), 150)
	left, _ := p.FailedEvents(l.Ctx, 10)
	want(t, "unresolved left", len(left), 0)
	want(t, "resolution", l.Count(`SELECT count(*) FROM inbox.failed WHERE id = $1 AND resolution = 'retried'`, f.ID), 1)
	want(t, "E3 redelivered", l.processOK(p, evs[2]).Outcome, inbox.Duplicate)
	if _, err := p.RetryFailed(l.Ctx, f.ID); !errors.Is(err, inbox.ErrFailedNotFound) {
		t.Fatalf("second RetryFailed = %v, want ErrFailedNotFound", err)
	}
	summary(t, "v3 permanent, v4-v5 parked; retry broken -> error attempts=2; fixed -> %s version=%d unparked=%d amount=%d",
		res.Outcome, res.Version, res.Unparked, l.Amount("42"))
}

// ResolveFailed skips the failed event: the aggregate moves past it and the parked events behind it
// apply in the same transaction; a redelivery of the skipped event has no effect.
func TestResolveFailedSkipsTheEventAndUnblocksTheAggregate(t *testing.T) {
	l, p, evs, f := poisonLab(t)
	other := l.ProcessorOn(l.DB, inbox.Config{Consumer: "another-projection"})
	if err := other.ResolveFailed(l.Ctx, f.ID, "not mine"); !errors.Is(err, inbox.ErrFailedNotFound) {
		t.Fatalf("another consumer's ResolveFailed = %v, want ErrFailedNotFound", err)
	}
	l.skipInProjection("42", 3)
	if err := p.ResolveFailed(l.Ctx, f.ID, "rule 7 exception approved by ops"); err != nil {
		t.Fatal(err)
	}
	st, err := p.State(l.Ctx, "order", "42")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "applied", st.Applied, 5)
	want(t, "amount without E3", l.Amount("42"), 120)
	want(t, "parked left", l.Count(`SELECT count(*) FROM inbox.parked`), 0)
	want(t, "E3 skipped in the inbox", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1 AND status = 'skipped'`, evs[2].ID), 1)
	want(t, "note kept", l.Count(`SELECT count(*) FROM inbox.failed WHERE id = $1 AND resolution = 'resolved'
		AND note = 'rule 7 exception approved by ops'`, f.ID), 1)
	l.Fault = nil
	want(t, "E3 redelivered", l.processOK(p, evs[2]).Outcome, inbox.Duplicate)
	want(t, "amount after the redelivery", l.Amount("42"), 120)
	summary(t, "v3 permanent, v4-v5 parked; resolved -> applied=%d amount=%d (without v3's 30), v3 again: duplicate",
		st.Applied, l.Amount("42"))
}

// A conflict or a malformed message is resolved without touching any aggregate; a malformed one
// cannot be retried.
func TestResolveFailedConflictAndMalformed(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e1 := order("42", 1, 10)
	l.processOK(p, e1)
	changed := e1
	changed.Payload = []byte(`{"delta": 11}`)
	want(t, "changed content", l.processOK(p, changed).Outcome, inbox.Conflict)
	want(t, "malformed", l.processOK(p, inbox.Event{ID: "m-1"}).Outcome, inbox.Failed)
	failed, err := p.FailedEvents(l.Ctx, 10)
	if err != nil || len(failed) != 2 {
		t.Fatalf("failed = %+v, %v", failed, err)
	}
	res, err := p.RetryFailed(l.Ctx, failed[0].ID)
	if err != nil || res.Outcome != inbox.Conflict {
		t.Fatalf("retry of a conflict = %v, %v; want Conflict", res, err)
	}
	if _, err := p.RetryFailed(l.Ctx, failed[1].ID); !errors.Is(err, inbox.ErrMalformed) {
		t.Fatalf("retry of a malformed record = %v, want ErrMalformed", err)
	}
	for _, f := range failed {
		if err := p.ResolveFailed(l.Ctx, f.ID, "checked"); err != nil {
			t.Fatal(err)
		}
	}
	left, _ := p.FailedEvents(l.Ctx, 10)
	want(t, "unresolved left", len(left), 0)
	st, _ := p.State(l.Ctx, "order", "42")
	want(t, "applied", st.Applied, 1)
	summary(t, "conflict retried -> conflict, malformed retry refused; both resolved; aggregate untouched at %d", st.Applied)
}
