package runner_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/internal/inboxlab"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// A consumer started while its PostgreSQL is down does not exit: New returns the Processor, the
// Runner logs that it waits for PostgreSQL (one warning per attempt, with the backoff of a failing
// delivery), and once the server is started it runs Config.Prepare (the migration and the projection's
// tables), checks the schema, connects to the broker and applies what was queued meanwhile.
func TestRunnerWaitsForPostgresAtStart(t *testing.T) {
	l := newRunnerLab(t) // the broker side; the projection lives in a cluster of its own
	own, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(own.Close)
	own.Stop("fast")

	pool, err := pgxpool.New(l.Ctx, own.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	prepared := 0
	cfg := inbox.Config{Consumer: l.consumer, Prepare: func(ctx context.Context, tx pgx.Tx) error {
		prepared++
		if err := inbox.Migrate(ctx, tx); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, strings.ReplaceAll(strings.ReplaceAll(inboxlab.ProjectionSQL, "CREATE TABLE", "CREATE TABLE IF NOT EXISTS"), "\n", " "))
		return err
	}}
	p, err := inbox.New(pool, l.Handle, cfg, l.logger())
	if err != nil {
		t.Fatalf("New with PostgreSQL down: %v, want the Processor (the Runner waits)", err)
	}
	rc := l.config(2)
	rc.RetryMax = 500 * time.Millisecond
	stop := l.start(p, rc)
	var events []inbox.Event
	for v := int64(1); v <= 20; v++ {
		events = append(events, order("order-7", v, v))
	}
	l.publishAll(events)
	l.waitFor("the runner logs that it waits for PostgreSQL", 10*time.Second, func() bool {
		return strings.Count(l.logs.String(), "inbox runner waiting for PostgreSQL") >= 3
	})
	if l.logs.contains("inbox runner consuming") {
		t.Errorf("the runner consumed while PostgreSQL was down")
	}
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	l.waitFor("PostgreSQL answers", 20*time.Second, func() bool {
		return l.logs.contains("inbox runner: PostgreSQL answers")
	})
	var applied, amount int64
	l.waitFor("every event applied", 30*time.Second, func() bool {
		err := pool.QueryRow(l.Ctx, `SELECT (SELECT count(*) FROM applied_log),
			coalesce((SELECT amount FROM projection WHERE id = 'order-7'), 0)`).Scan(&applied, &amount)
		return err == nil && applied == int64(len(events))
	})
	want(t, "amount", amount, 210)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	summary(t, "%d waits logged before PostgreSQL started; Prepare ran %d times; %d events applied",
		strings.Count(l.logs.String(), "inbox runner waiting for PostgreSQL"), prepared, applied)
}
