package runner_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
)

// requestsLab is a runner lab of order 42 with v1 applied and the versions in parked parked, and the
// Admin that files requests for its consumer.
func requestsLab(t *testing.T, parked ...inbox.Event) (*runnerLab, *inbox.Processor, *inbox.Admin) {
	t.Helper()
	l := newRunnerLab(t)
	p := l.processor(inbox.Config{})
	for _, ev := range append([]inbox.Event{order("42", 1, 1)}, parked...) {
		if _, err := p.Process(l.Ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := inbox.NewAdmin(l.Ctx, l.pool, inbox.Config{Consumer: l.consumer})
	if err != nil {
		t.Fatal(err)
	}
	return l, p, admin
}

// requestRow is a request's state, outcome and detail as the table holds them.
func (l *runnerLab) requestRow(admin *inbox.Admin, id int64) inbox.RequestState {
	l.T.Helper()
	st, err := admin.State(l.Ctx, id)
	if err != nil {
		l.T.Fatal(err)
	}
	return st
}

// Issue 35, finding 3, as measured: v1 applied, v3 parked behind a quarantined v2; an operator's resolve
// of v3 is filed while no runner runs and the command gives up waiting (the request expires); the
// producer fixes v2 and replays it; the consumer starts. v2 and v3 are applied in order and the expired
// request is never carried out (before the fix it ran first, skipped v2, and the replayed v2 was stale).
func TestRunnerExpiredResolveIsNotCarriedOut(t *testing.T) {
	v2, v3 := order("42", 2, 20), order("42", 3, 300)
	l, p, admin := requestsLab(t, v3)
	id, err := admin.Request(l.Ctx, inbox.Request{Action: "resolve", Kind: "parked", Target: v3.ID,
		ExpireAfter: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(l.Ctx, 300*time.Millisecond)
	st, err := admin.Await(wctx, id, 50*time.Millisecond)
	cancel()
	if err != nil || st.Done {
		t.Fatalf("request %d without a runner = %+v, %v; want not done", id, st, err)
	}
	if _, err := admin.Expire(l.Ctx, id); err != nil { // what the command does when it gives up
		t.Fatal(err)
	}
	want(t, "request state after the wait", l.requestRow(admin, id).State, inbox.RequestExpired)

	l.publishAll([]inbox.Event{v2})
	cfg := l.config(2)
	cfg.RequestPoll = 20 * time.Millisecond
	stop := l.start(p, cfg)
	l.waitFor("v2 processed", 30*time.Second, func() bool {
		return l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1`, v2.ID) == 1
	})
	time.Sleep(200 * time.Millisecond) // several request polls
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want(t, "amount (v1 + v2 + v3)", l.Amount("42"), 1+20+300)
	want(t, "v2 applied", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1 AND status = 'applied'`, v2.ID), 1)
	want(t, "applied version", l.Count(`SELECT applied_version FROM inbox.aggregate WHERE consumer = $1`, l.consumer), 3)
	st = l.requestRow(admin, id)
	want(t, "expired request taken", st.Taken, false)
	want(t, "expired request state", st.State, inbox.RequestExpired)
	want(t, "versions skipped", l.Count(`SELECT count(*) FROM inbox.skipped`), 0)
	summary(t, "v1 applied, v3 parked, resolve expired unanswered, v2 replayed: amount=%d applied=3 request=%s",
		l.Amount("42"), st.State)
}

// A resolve left filed on purpose that runs after a missing version arrived is refused with its outcome
// recorded ("the missing version 2 arrived; nothing skipped"), and the aggregate carries on when the
// rest arrives.
func TestRunnerResolveRefusedWhenTheMissingVersionArrived(t *testing.T) {
	v2, v3, v4 := order("42", 2, 20), order("42", 3, 300), order("42", 4, 4000)
	l, p, admin := requestsLab(t, v4)
	id, err := admin.Request(l.Ctx, inbox.Request{Action: "resolve", Kind: "parked", Target: v4.ID, Note: "v2, v3 lost"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := l.config(2)
	cfg.RequestPoll = -1 // serves no request: v2 arrives first
	l.publishAll([]inbox.Event{v2})
	stop := l.start(p, cfg)
	l.waitFor("v2 applied", 30*time.Second, func() bool { return l.Amount("42") == 1+20 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	cfg.RequestPoll, cfg.Registerer = 20*time.Millisecond, nil // the first runner's metrics stay registered
	stop = l.start(p, cfg)
	st, err := admin.Await(l.Ctx, id, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "outcome", st.Outcome, inbox.OutcomeRefused)
	if !strings.Contains(st.Error, "the missing version 2 arrived") || !strings.Contains(st.Error, "nothing skipped") {
		t.Errorf("refusal = %q", st.Error)
	}
	want(t, "amount after the refusal", l.Amount("42"), 1+20)
	want(t, "versions skipped", l.Count(`SELECT count(*) FROM inbox.skipped`), 0)
	l.publishAll([]inbox.Event{v3})
	l.waitFor("v3 and v4 applied", 30*time.Second, func() bool { return l.Amount("42") == 1+20+300+4000 })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	if !l.logs.contains("inbox request refused") {
		t.Errorf("no log of the refusal:\n%s", l.logs.tail(2000))
	}
	summary(t, "resolve of v4 filed at v1, run at v2: %s (%s)", st.Outcome, st.Error)
}

// A version that arrives after a resolve skipped it is recorded as failed (reason skipped) with a WARN
// naming the consumer, the aggregate, the version and the request; never a silent Stale.
func TestRunnerVersionArrivingAfterSkipIsFailed(t *testing.T) {
	v2, v3 := order("42", 2, 20), order("42", 3, 300)
	l, p, admin := requestsLab(t, v3)
	cfg := l.config(2)
	cfg.RequestPoll = 20 * time.Millisecond
	stop := l.start(p, cfg)
	if _, err := l.DB.Exec(l.Ctx, `UPDATE projection SET version = 2 WHERE id = '42'`); err != nil {
		t.Fatal(err) // the operator's correction of the projection for the lost v2
	}
	id, err := admin.Request(l.Ctx, inbox.Request{Action: "resolve", Kind: "parked", Target: v3.ID,
		Note: "v2 lost", ExpireAfter: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	st, err := admin.Await(l.Ctx, id, 20*time.Millisecond)
	if err != nil || st.Outcome != "applied" {
		t.Fatalf("resolve = %+v, %v; want applied", st, err)
	}
	l.publishAll([]inbox.Event{v2})
	l.waitFor("v2 recorded failed", 30*time.Second, func() bool {
		return l.Count(`SELECT count(*) FROM inbox.failed WHERE event_id = $1 AND reason = 'skipped'`, v2.ID) == 1
	})
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	want(t, "amount (v1 + v3)", l.Amount("42"), 1+300)
	want(t, "v2 in the inbox", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1`, v2.ID), 0)
	var warn string
	for _, line := range strings.Split(l.logs.String(), "\n") {
		if strings.Contains(line, "level=WARN") && strings.Contains(line, "skipped by a resolve arrived") {
			warn = line
		}
	}
	for _, s := range []string{"consumer=" + l.consumer, "aggregate_type=order", "aggregate_id=42", "version=2",
		fmt.Sprintf("request_id=%d", id)} {
		if !strings.Contains(warn, s) {
			t.Errorf("WARN line %q lacks %q; log:\n%s", warn, s, l.logs.tail(3000))
		}
	}
	failed, err := admin.FailedEvents(l.Ctx, 10)
	if err != nil || len(failed) != 1 || !strings.Contains(failed[0].Detail, fmt.Sprintf("inbox request %d", id)) {
		t.Errorf("failed events = %+v, %v; want v2's, naming request %d", failed, err, id)
	}
	summary(t, "v2 after resolve %d skipped it: failed (skipped), amount=%d", id, l.Amount("42"))
}
