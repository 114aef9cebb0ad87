package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// A consumer frozen mid-transaction (SIGSTOP, a GC pause, a hung network) holds its aggregate's row
// lock. Another processor then drains the other aggregates at once, and the frozen aggregate's event
// fails with a transient error within LockTimeout (+ 1s) instead of waiting for the freeze to end; it
// is not counted as an attempt, and applies once the lock is gone.
func TestFrozenConsumerStallsOnlyItsAggregate(t *testing.T) {
	const lockTimeout, margin, others = time.Second, time.Second, 20
	l := newLab(t)
	cfg := inbox.Config{LockTimeout: lockTimeout}
	p := l.ProcessorOn(l.Connect(), cfg) // one connection, so one processor, per goroutine
	l.processOK(p, order("42", 1, 10))

	frozen, err := l.Connect().Begin(l.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback(context.Background())
	if _, err := frozen.Exec(l.Ctx, `SELECT 1 FROM inbox.aggregate WHERE consumer = 'orders-projection'
		AND aggregate_type = 'order' AND aggregate_id = '42' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}

	procs := make([]*inbox.Processor, others)
	for i := range procs {
		procs[i] = l.ProcessorOn(l.Connect(), cfg)
	}
	var wg sync.WaitGroup
	begun := time.Now()
	var blockedErr error
	var blockedTook time.Duration
	wg.Go(func() {
		_, blockedErr = p.Process(l.Ctx, order("42", 2, 10))
		blockedTook = time.Since(begun)
	})
	tookOthers := make([]time.Duration, others)
	for i := range others {
		wg.Go(func() {
			_, err := procs[i].Process(l.Ctx, order(fmt.Sprint(i), 1, 1))
			if err != nil {
				t.Errorf("aggregate %d: %v", i, err)
			}
			tookOthers[i] = time.Since(begun)
		})
	}
	wg.Wait()
	slowest := time.Duration(0)
	for _, d := range tookOthers {
		slowest = max(slowest, d)
	}
	if slowest >= lockTimeout/2 {
		t.Errorf("the other aggregates took %s, want well under the lock timeout %s", slowest, lockTimeout)
	}
	if blockedErr == nil || !inbox.IsTransient(blockedErr) || inbox.FailedAttempts(blockedErr) != 0 {
		t.Fatalf("blocked event: %v (counted %d); want a transient error, not counted", blockedErr, inbox.FailedAttempts(blockedErr))
	}
	if blockedTook < lockTimeout || blockedTook > lockTimeout+margin {
		t.Errorf("blocked event returned after %s, want within [%s, %s]", blockedTook, lockTimeout, lockTimeout+margin)
	}
	if err := frozen.Rollback(l.Ctx); err != nil {
		t.Fatal(err)
	}
	res := l.processOK(p, order("42", 2, 10))
	want(t, "after the freeze", res.Outcome, inbox.Applied)
	summary(t, "lock-timeout=%s: %d other aggregates done in %s; frozen aggregate's event failed after %s (bound %s) with %q, then applied",
		lockTimeout, others, slowest.Round(time.Millisecond), blockedTook.Round(time.Millisecond), lockTimeout+margin, blockedErr)
}

// idle_in_transaction_session_timeout, which docs/consumers.md recommends on the consumer's role, ends
// the frozen transaction itself: its aggregate is free again without anyone rolling it back.
func TestIdleInTransactionTimeoutFreesAFrozenAggregate(t *testing.T) {
	const idle = time.Second
	l := newLab(t)
	p := l.Processor(inbox.Config{LockTimeout: 3 * idle})
	l.processOK(p, order("42", 1, 10))
	c := l.Connect()
	if _, err := c.Exec(l.Ctx, fmt.Sprintf(`SET idle_in_transaction_session_timeout = '%dms'`, idle.Milliseconds())); err != nil {
		t.Fatal(err)
	}
	frozen, err := c.Begin(l.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := frozen.Exec(l.Ctx, `SELECT 1 FROM inbox.aggregate WHERE consumer = 'orders-projection'
		AND aggregate_id = '42' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	begun := time.Now()
	res := l.processOK(p, order("42", 2, 10)) // waits for the server to end the idle transaction
	took := time.Since(begun)
	want(t, "outcome", res.Outcome, inbox.Applied)
	if took < idle/2 || took > 3*idle {
		t.Errorf("applied after %s, want about the idle timeout %s", took, idle)
	}
	summary(t, "idle_in_transaction_session_timeout=%s freed the frozen aggregate: applied after %s", idle, took.Round(time.Millisecond))
}

// Every event's transaction runs with the configured timeouts; a handler that overruns the statement
// timeout fails, and that failure counts as an attempt (it would recur for the same event).
func TestTransactionTimeouts(t *testing.T) {
	l := newLab(t)
	var lock, statement string
	l.Fault = func(ctx context.Context, tx pgx.Tx, _ inbox.Event) error {
		return tx.QueryRow(ctx, `SELECT current_setting('lock_timeout'), current_setting('statement_timeout')`).
			Scan(&lock, &statement)
	}
	l.processOK(l.Processor(inbox.Config{}), order("1", 1, 1))
	want(t, "default lock_timeout", lock, "5s")
	want(t, "default statement_timeout", statement, "30s")

	p := l.Processor(inbox.Config{LockTimeout: 250 * time.Millisecond, StatementTimeout: 200 * time.Millisecond})
	l.Fault = func(ctx context.Context, tx pgx.Tx, _ inbox.Event) error {
		_, err := tx.Exec(ctx, `SELECT pg_sleep(2)`)
		return err
	}
	begun := time.Now()
	_, err := p.Process(l.Ctx, order("2", 1, 1))
	took := time.Since(begun)
	if err == nil || inbox.FailedAttempts(err) != 1 || took > time.Second {
		t.Fatalf("overrunning handler: %v after %s (counted %d); want a counted failure well before 2s", err, took, inbox.FailedAttempts(err))
	}
	summary(t, "defaults lock_timeout=%s statement_timeout=%s; a 2s statement under 200ms failed after %s, counted",
		lock, statement, took.Round(time.Millisecond))
}
