package runner_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// One event's handler fails four times, then succeeds. Its retries wait on a timer of their own: the
// other aggregates' events, queued behind it, are applied meanwhile; the event applies on its fifth
// attempt, and its aggregate's later events only after it.
func TestRunnerRetryDoesNotHoldOtherAggregates(t *testing.T) {
	const failures = 4
	l := newRunnerLab(t)
	var poison []inbox.Event
	for v := int64(1); v <= 5; v++ {
		poison = append(poison, order("poison", v, v))
	}
	_, others := orderStream(7, 20, 10, 0)
	target := poison[1].ID

	var mu sync.Mutex
	calls := 0
	var firstFailure, success time.Time
	var appliedAt []time.Time // successes of other aggregates
	l.wrap = func(ctx context.Context, tx pgx.Tx, ev inbox.Event, next inbox.Handler) error {
		mu.Lock()
		if ev.ID == target {
			calls++
			if calls <= failures {
				if calls == 1 {
					firstFailure = time.Now()
				}
				mu.Unlock()
				return errors.New("flaky downstream")
			}
		}
		mu.Unlock()
		if err := next(ctx, tx, ev); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		switch {
		case ev.ID == target:
			success = time.Now()
		case ev.AggregateID != "poison":
			appliedAt = append(appliedAt, time.Now())
		}
		return nil
	}
	l.publishAll(append(append([]inbox.Event(nil), poison...), others...))
	cfg := l.config(4)
	cfg.RetryMin, cfg.RetryMax = 100*time.Millisecond, 400*time.Millisecond
	stop := l.start(l.processor(inbox.Config{}), cfg)
	total := int64(len(poison) + len(others))
	l.waitFor("every event applied", 30*time.Second, func() bool {
		return l.Count(`SELECT count(*) FROM applied_log`) == total
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	mu.Lock()
	defer mu.Unlock()
	during := 0
	for _, at := range appliedAt {
		if at.After(firstFailure) && at.Before(success) {
			during++
		}
	}
	want(t, "attempts of the failing event", calls, failures+1)
	want(t, "poison's version", l.Count(`SELECT version FROM projection WHERE id = 'poison'`), 5)
	want(t, "poison's amount", l.Amount("poison"), 15)
	want(t, "handler retries metric", metric(t, l.reg, "cdc_router_inbox_handler_retries_total"), failures)
	want(t, "error outcomes", metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "error"), failures)
	want(t, "parked outcomes", metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "parked"), 0)
	if during == 0 {
		t.Errorf("no other aggregate's event was applied while the failing event waited for its retries")
	}
	// The poison aggregate's later versions were applied after the failing one: its handler insists on
	// the previous version, and the log order shows it.
	var order []string
	rows, err := l.DB.Query(l.Ctx, `SELECT event_id FROM applied_log ORDER BY n`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		rows.Scan(&id)
		order = append(order, id)
	}
	pos := map[string]int{}
	for i, id := range order {
		pos[id] = i
	}
	for v := 1; v < len(poison); v++ {
		if pos[poison[v].ID] < pos[poison[v-1].ID] {
			t.Errorf("poison v%d applied before v%d", v+1, v)
		}
	}
	summary(t, "event failed %d times over %v; meanwhile %d of %d other aggregates' events were applied",
		failures, success.Sub(firstFailure).Round(time.Millisecond), during, len(others))
}

// Under policy Requeue an event ahead of a gap is requeued from a timer while its aggregate's lane goes
// on: the missing event right behind it is applied, then the requeued one; nothing parks.
func TestRunnerRequeuesGapWithoutSleepingOnTheChannel(t *testing.T) {
	l := newRunnerLab(t)
	g := []inbox.Event{order("g", 1, 1), order("g", 2, 2), order("g", 3, 3)}
	_, others := orderStream(3, 10, 10, 0)
	msgs := append([]inbox.Event{g[1], g[2], g[0]}, others...)
	l.publishAll(msgs)
	stop := l.start(l.processor(inbox.Config{OnGap: inbox.Requeue}), l.config(4))
	total := int64(len(g) + len(others))
	l.waitFor("every event applied", 30*time.Second, func() bool {
		return l.Count(`SELECT count(*) FROM applied_log`) == total
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want(t, "g's version", l.Count(`SELECT version FROM projection WHERE id = 'g'`), 3)
	want(t, "parked", metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "parked"), 0)
	gaps := metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "gap")
	if gaps < 2 {
		t.Errorf("gap outcomes = %v, want at least 2 (v2 and v3 arrived first)", gaps)
	}
	summary(t, "OnGap Requeue: applied %d events with %v gap requeues", total, gaps)
}

// A handler that always fails: after Config.MaxAttempts the event is recorded as failed and its delivery
// acknowledged; the other aggregates were applied meanwhile.
func TestRunnerStopsRetryingAtMaxAttempts(t *testing.T) {
	l := newRunnerLab(t)
	bad := order("bad", 1, 1)
	_, others := orderStream(5, 10, 10, 0)
	calls := 0
	l.wrap = func(ctx context.Context, tx pgx.Tx, ev inbox.Event, next inbox.Handler) error {
		if ev.ID == bad.ID {
			calls++ // only bad's lane runs it: no race
			return errors.New("never works")
		}
		return next(ctx, tx, ev)
	}
	l.publishAll(append([]inbox.Event{bad}, others...))
	stop := l.start(l.processor(inbox.Config{MaxAttempts: 3}), l.config(4))
	l.waitFor("the event recorded as failed", 30*time.Second, func() bool {
		return metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "failed") == 1
	})
	l.waitFor("the others applied", 30*time.Second, func() bool {
		return l.Count(`SELECT count(*) FROM applied_log`) == int64(len(others))
	})
	l.waitFor("every delivery acknowledged", 10*time.Second, func() bool { return l.queueMessages() == 0 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	want(t, "handler calls", calls, 3)
	want(t, "errors before the cap", metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "error"), 2)
	want(t, "cdc_router_inbox_failed_events", metric(t, l.reg, "cdc_router_inbox_failed_events"), 1)
	want(t, "failed rows", l.Count(`SELECT count(*) FROM inbox.failed WHERE event_id = $1`, bad.ID), 1)
}
