package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// failFor makes the lab's handler fail, with a retryable error, for the events whose ids are in ids.
func (l *lab) failFor(ids ...string) {
	l.Fault = func(_ context.Context, _ pgx.Tx, ev inbox.Event) error {
		for _, id := range ids {
			if ev.ID == id {
				return errors.New("downstream unavailable")
			}
		}
		return nil
	}
}

// A handler that keeps failing with a retryable error is given MaxAttempts attempts, counted per event
// and durably, so another event's success in between resets nothing; the last attempt records it in
// failed ('exhausted', with the last error and the content) and returns Failed so the delivery is
// acknowledged.
func TestRetryableFailureIsCappedPerEvent(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{MaxAttempts: 3})
	poison := order("42", 1, 10)
	l.failFor(poison.ID)
	for n := 1; n <= 2; n++ {
		_, err := p.Process(l.Ctx, poison)
		if err == nil {
			t.Fatalf("attempt %d succeeded", n)
		}
		want(t, "counted attempts", inbox.FailedAttempts(err), n)
		// Another event's success does not reset the poison's count.
		if res := l.processOK(p, order("7", int64(n), 1)); res.Outcome != inbox.Applied {
			t.Fatalf("other aggregate: %v", res.Outcome)
		}
	}
	res, err := p.Process(l.Ctx, poison)
	if err != nil {
		t.Fatalf("third attempt: %v", err)
	}
	want(t, "third attempt", res.Outcome, inbox.Failed)
	want(t, "acknowledged", res.Outcome.Ack(), true)
	failed, err := p.FailedEvents(l.Ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(failed) != 1 {
		t.Fatalf("failed events = %d, want 1", len(failed))
	}
	f := failed[0]
	want(t, "reason", f.Reason, "exhausted")
	want(t, "attempts", f.Attempts, 3)
	want(t, "stored payload", string(f.Event.Payload), string(poison.Payload))
	want(t, "stored fingerprint matches", string(f.Event.Fingerprint()), string(poison.Fingerprint()))
	if !strings.Contains(f.Detail, "downstream unavailable") {
		t.Errorf("detail %q lacks the last error", f.Detail)
	}
	want(t, "attempt rows left", l.Count(`SELECT count(*) FROM inbox.attempts`), 0)
	want(t, "inbox row of the failed event", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1`, poison.ID), 0)
	summary(t, "max-attempts=3 attempts=%d reason=%s other-aggregate-successes-between=2 detail=%q",
		f.Attempts, f.Reason, f.Detail)
}

// A success clears the event's count; contention and a cancelled context count no attempt.
func TestAttemptsClearedBySuccessAndNotCountedForContention(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{MaxAttempts: 3})
	e1 := order("42", 1, 10)
	l.failFor(e1.ID)
	for range 2 {
		if _, err := p.Process(l.Ctx, e1); inbox.FailedAttempts(err) == 0 {
			t.Fatalf("failure not counted: %v", err)
		}
	}
	l.Fault = nil
	want(t, "after a success", l.processOK(p, e1).Outcome, inbox.Applied)
	want(t, "attempt rows after the success", l.Count(`SELECT count(*) FROM inbox.attempts`), 0)

	e2 := order("42", 2, 10)
	l.Fault = func(ctx context.Context, tx pgx.Tx, _ inbox.Event) error {
		_, err := tx.Exec(ctx, `DO $$ BEGIN RAISE EXCEPTION 'injected' USING ERRCODE = 'lock_not_available'; END $$`)
		return err
	}
	for range 5 {
		_, err := p.Process(l.Ctx, e2)
		if err == nil || !inbox.IsTransient(err) || inbox.FailedAttempts(err) != 0 {
			t.Fatalf("lock timeout: err %v, counted %d; want a transient error, not counted", err, inbox.FailedAttempts(err))
		}
	}
	cancelled, cancel := context.WithCancel(l.Ctx)
	l.Fault = func(context.Context, pgx.Tx, inbox.Event) error { cancel(); return context.Canceled }
	if _, err := p.Process(cancelled, e2); err == nil || inbox.FailedAttempts(err) != 0 {
		t.Fatalf("cancelled: err %v, counted %d", err, inbox.FailedAttempts(err))
	}
	want(t, "attempt rows after contention and a cancel", l.Count(`SELECT count(*) FROM inbox.attempts`), 0)
	summary(t, "counted=2 then applied, attempts cleared; 5 lock timeouts and 1 cancel counted 0")
}

// A parked event whose handler keeps failing is counted as itself, not as the event that closes its
// gap: after MaxAttempts it moves to failed and the closing event commits; ResolveFailed then moves
// the aggregate past it and applies what was parked behind it.
func TestParkedEventFailingIsCappedAndResolved(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{MaxAttempts: 2})
	e1, e2, e3 := order("42", 1, 1), order("42", 2, 10), order("42", 3, 100)
	l.failFor(e2.ID)
	want(t, "E2 first", l.processOK(p, e2).Outcome, inbox.Parked)
	_, err := p.Process(l.Ctx, e1)
	want(t, "E2's attempts after E1's first try", inbox.FailedAttempts(err), 1)
	want(t, "E1 counted", l.Count(`SELECT count(*) FROM inbox.attempts WHERE event_id = $1`, e1.ID), 0)
	res := l.processOK(p, e1)
	want(t, "E1 on E2's last attempt", res, inbox.Result{Outcome: inbox.Applied, Version: 1})
	want(t, "E3 behind the failed E2", l.processOK(p, e3).Outcome, inbox.Parked)

	failed, err := p.FailedEvents(l.Ctx, 10)
	if err != nil || len(failed) != 1 || failed[0].Event.ID != e2.ID || failed[0].Reason != "exhausted" {
		t.Fatalf("failed events = %+v, %v; want E2 exhausted", failed, err)
	}
	l.skipInProjection("42", 2)
	if err := p.ResolveFailed(l.Ctx, failed[0].ID, "E2 skipped: downstream retired"); err != nil {
		t.Fatal(err)
	}
	st, err := p.State(l.Ctx, "order", "42")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "applied after resolve", st.Applied, 3)
	want(t, "amount without E2", l.Amount("42"), 101)
	want(t, "E2 redelivered", l.processOK(p, e2).Outcome, inbox.Duplicate)
	summary(t, "max-attempts=2: E2 parked, failed twice while E1 retried, exhausted; resolved: applied=%d amount=%d",
		st.Applied, l.Amount("42"))
}

// skipInProjection is the operator's correction before ResolveFailed skips version v of an order: the
// lab's projection insists on version order, so it is told that v is accounted for.
func (l *lab) skipInProjection(id string, v int64) {
	l.T.Helper()
	if _, err := l.DB.Exec(l.Ctx, `UPDATE projection SET version = $2 WHERE id = $1 AND version = $2 - 1`, id, v); err != nil {
		l.T.Fatal(err)
	}
}

// processOK processes ev and fails the test on an error.
func (l *lab) processOK(p *inbox.Processor, ev inbox.Event) inbox.Result {
	l.T.Helper()
	res, err := p.Process(l.Ctx, ev)
	if err != nil {
		l.T.Fatalf("process %s v%d: %v", ev.AggregateID, ev.AggregateVersion, err)
	}
	return res
}
