package runner_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// The program of docs/consumers.md: applyOrder, runConsumer and, as Example_runner, its main.
// TestRunnerDocsExample runs it against the test's broker and database.

// applyOrder is the business write. It runs inside the inbox transaction: use tx, nothing else.
func applyOrder(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	var body struct {
		Delta int64 `json:"delta"`
	}
	if err := json.Unmarshal(ev.Payload, &body); err != nil {
		return inbox.Permanent(fmt.Errorf("read %s v%d: %w", ev.Type, ev.SchemaVersion, err))
	}
	_, err := tx.Exec(ctx, `INSERT INTO order_totals AS o (id, amount) VALUES ($1, $2)
		ON CONFLICT (id) DO UPDATE SET amount = o.amount + EXCLUDED.amount`, ev.AggregateID, body.Delta)
	return err // any error rolls back the projection AND the inbox row; the delivery is retried
}

// runConsumer runs the projection until ctx is cancelled, then stops gracefully and returns nil.
func runConsumer(ctx context.Context, getenv func(string) string, log *slog.Logger) error {
	db, err := pgxpool.New(ctx, getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer db.Close()
	p, err := inbox.New(db, applyOrder, inbox.Config{Consumer: "orders-projection",
		// Runs once PostgreSQL answers: New, or the Runner waits for it (a warning per retry).
		Prepare: func(ctx context.Context, tx pgx.Tx) error { return inbox.Migrate(ctx, tx) }, // idempotent
	}, log)
	if err != nil {
		return err // a missing or outdated inbox schema; a database that is down is waited for
	}
	reg := prometheus.NewRegistry()
	if addr := getenv("METRICS_ADDR"); addr != "" { // e.g. ":9464"
		srv := &http.Server{Addr: addr, Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{})}
		go srv.ListenAndServe() //nolint:errcheck // closed below
		defer srv.Close()
	}
	r, err := runner.New(p, runner.Config{
		URLs:       strings.Split(getenv("AMQP_URLS"), ","), // tried in order: amqp://user:pw@rabbit-1/,amqp://...
		Exchange:   getenv("EXCHANGE"),                      // "" is "outbox", cdc-router's default
		Queue:      cmp.Or(getenv("QUEUE"), "orders-projection"),
		Bindings:   []string{"order.#"},
		Workers:    8,
		Registerer: reg,
	}, log)
	if err != nil {
		return err
	}
	return r.Run(ctx) // waits for PostgreSQL and the router's exchange; reconnects by itself; nil after a graceful stop
}

// Example_runner is the program's main.
func Example_runner() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	if err := runConsumer(ctx, os.Getenv, log); err != nil {
		log.Error("consumer stopped", "error", err)
		os.Exit(1)
	}
}

// The documented program, run as written: it applies the events published to its queue and returns nil
// when its context is cancelled.
func TestRunnerDocsExample(t *testing.T) {
	l := newRunnerLab(t)
	if _, err := l.DB.Exec(l.Ctx, `CREATE TABLE order_totals (id text PRIMARY KEY, amount bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"DATABASE_URL": l.URL, "AMQP_URLS": testenv.AMQPURL(t), "EXCHANGE": l.Exchange,
		"QUEUE": l.queue}
	var events []inbox.Event
	for v := int64(1); v <= 20; v++ {
		events = append(events, order("order-42", v, v))
	}
	l.publishAll(events)
	ctx, cancel := context.WithCancel(l.Ctx)
	done := make(chan error, 1)
	go func() { done <- runConsumer(ctx, func(k string) string { return env[k] }, l.logger()) }()
	l.waitFor("the projection reaches 210", 30*time.Second, func() bool {
		return l.Count(`SELECT coalesce((SELECT amount FROM order_totals WHERE id = 'order-42'), 0)`) == 210
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("runConsumer: %v", err)
	}
	want(t, "inbox rows", l.Count(`SELECT count(*) FROM inbox.inbox WHERE consumer = 'orders-projection'`), 20)
}
