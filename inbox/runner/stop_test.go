package runner_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// slowFirst makes the handler of the lab's first event announce itself on started and then take hold
// (or until its context is cancelled), recording the context's error when it returns.
func slowFirst(l *runnerLab, id string, hold time.Duration, started chan<- struct{}, ctxErr chan<- error) {
	l.wrap = func(ctx context.Context, tx pgx.Tx, ev inbox.Event, next inbox.Handler) error {
		if ev.ID != id {
			return next(ctx, tx, ev)
		}
		close(started)
		select {
		case <-time.After(hold):
		case <-ctx.Done():
		}
		ctxErr <- ctx.Err()
		if err := ctx.Err(); err != nil {
			return err
		}
		return next(ctx, tx, ev)
	}
}

// A stop while a slow handler runs lets it finish with its context intact: it commits, its delivery is
// acknowledged, and the events queued behind it are requeued untouched.
func TestRunnerStopLetsTheHandlerInFlightFinish(t *testing.T) {
	l := newRunnerLab(t)
	events := []inbox.Event{order("s", 1, 1), order("s", 2, 2), order("s", 3, 3), order("s", 4, 4)}
	started, ctxErr := make(chan struct{}), make(chan error, 1)
	slowFirst(l, events[0].ID, time.Second, started, ctxErr)
	l.publishAll(events)
	stop := l.start(l.processor(inbox.Config{}), l.config(2))
	<-started
	begun := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	took := time.Since(begun)
	if err := <-ctxErr; err != nil {
		t.Errorf("the handler's context was cancelled by the stop: %v", err)
	}
	want(t, "applied", l.Count(`SELECT count(*) FROM applied_log`), 1)
	want(t, "version", l.Count(`SELECT version FROM projection WHERE id = 's'`), 1)
	l.waitFor("the three later events requeued", 10*time.Second, func() bool { return l.queueMessages() == 3 })
	summary(t, "stop waited %v for the handler in flight, which committed; 3 queued events requeued",
		took.Round(time.Millisecond))
}

// A handler still running at the drain timeout has its context cancelled; nothing commits and every
// delivery, its own included, is requeued.
func TestRunnerDrainTimeoutCancelsTheHandler(t *testing.T) {
	l := newRunnerLab(t)
	events := []inbox.Event{order("s", 1, 1), order("s", 2, 2)}
	started, ctxErr := make(chan struct{}), make(chan error, 1)
	slowFirst(l, events[0].ID, time.Minute, started, ctxErr)
	l.publishAll(events)
	cfg := l.config(2)
	cfg.DrainTimeout = 300 * time.Millisecond
	stop := l.start(l.processor(inbox.Config{}), cfg)
	<-started
	begun := time.Now()
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	took := time.Since(begun)
	if err := <-ctxErr; err == nil {
		t.Errorf("the handler's context was not cancelled after the drain timeout")
	}
	if took < cfg.DrainTimeout || took > 10*time.Second {
		t.Errorf("stop took %v, want the drain timeout %v and a little", took, cfg.DrainTimeout)
	}
	want(t, "applied", l.Count(`SELECT count(*) FROM applied_log`), 0)
	l.waitFor("both events requeued", 10*time.Second, func() bool { return l.queueMessages() == 2 })
	summary(t, "drain timeout %v: the handler was cancelled, stop took %v, both deliveries requeued",
		cfg.DrainTimeout, took.Round(time.Millisecond))
}
