// Command accountsconsumer is the consumer of cmd/cdc-router's end-to-end test (TestEffectivelyOnce): one
// instance of an account-balance projection kept with the inbox package and its Runner.
//
// It migrates the inbox schema and creates its projection tables once PostgreSQL answers (an instance
// started while it is down waits for it), and applies each account event
// (event_type "deposited" or "withdrawn", payload {"amount": n}) to account_projection, and counts the
// application in apply_counter (one row per consumer and event id), in the inbox's transaction. It runs
// until SIGTERM or SIGINT and stops gracefully. Several instances with the same consumer name and queue
// are instances of one projection.
//
// Every outcome the Runner reports is written to stdout as one line, so that the test can count the
// deliveries even of an instance it kills:
//
//	outcome <applied|duplicate|stale|parked|gap|conflict|failed|error> <event id> <unparked>
//
// Logs go to stderr. Configuration comes from flags, each defaulting to an environment variable:
// -pg-url (E2E_PG_URL), -amqp-url (E2E_AMQP_URL), -exchange (E2E_EXCHANGE), -queue (E2E_QUEUE),
// -consumer (E2E_CONSUMER), -binding (E2E_BINDING, default "account.#"), -workers (default 4), -partitions
// (E2E_PARTITIONS: the instance joins the partitioned consumer group -queue of that many partitions), -quorum
// (E2E_QUORUM=true). -amqp-url may list several URLs, comma-separated (the nodes of a cluster).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

// projectionSQL creates the projection's tables; the advisory lock lets instances start together.
const projectionSQL = `SELECT pg_advisory_xact_lock(hashtext('accountsconsumer_migrate'));
CREATE TABLE IF NOT EXISTS account_projection (
    consumer text   NOT NULL,
    id       text   NOT NULL,
    balance  bigint NOT NULL,
    version  bigint NOT NULL,
    PRIMARY KEY (consumer, id)
);
CREATE TABLE IF NOT EXISTS apply_counter (
    consumer text    NOT NULL,
    event_id text    NOT NULL,
    count    integer NOT NULL,
    PRIMARY KEY (consumer, event_id)
);`

type config struct {
	pgURL, amqpURL, exchange, queue, consumer, binding string
	workers, partitions                                int
	quorum                                             bool
}

func readConfig(args []string, getenv func(string) string) (config, error) {
	var c config
	fs := flag.NewFlagSet("accountsconsumer", flag.ContinueOnError)
	fs.StringVar(&c.pgURL, "pg-url", getenv("E2E_PG_URL"), "PostgreSQL URL of the projection and its inbox")
	fs.StringVar(&c.amqpURL, "amqp-url", getenv("E2E_AMQP_URL"), "AMQP URL of the broker")
	fs.StringVar(&c.exchange, "exchange", getenv("E2E_EXCHANGE"), "the router's exchange")
	fs.StringVar(&c.queue, "queue", getenv("E2E_QUEUE"), "the queue the instances of this projection share")
	fs.StringVar(&c.consumer, "consumer", getenv("E2E_CONSUMER"), "the projection's consumer name")
	binding := getenv("E2E_BINDING")
	if binding == "" {
		binding = "account.#"
	}
	fs.StringVar(&c.binding, "binding", binding, "routing key the queue is bound with")
	fs.IntVar(&c.workers, "workers", 4, "events processed at once")
	partitions, _ := strconv.Atoi(getenv("E2E_PARTITIONS"))
	fs.IntVar(&c.partitions, "partitions", partitions, "partitions of the consumer group named by -queue (0: one shared queue)")
	fs.BoolVar(&c.quorum, "quorum", getenv("E2E_QUORUM") == "true", "declare quorum queues")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if c.pgURL == "" || c.amqpURL == "" || c.exchange == "" || c.queue == "" || c.consumer == "" {
		return c, fmt.Errorf("set -pg-url, -amqp-url, -exchange, -queue and -consumer (or their E2E_ variables)")
	}
	return c, nil
}

// apply is the projection's handler: the balance moves by the event's amount, the projection's version
// must be the one before the event's (the inbox applies in order), and the application is counted.
func apply(consumer string) inbox.Handler {
	return func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		var body struct {
			Amount int64 `json:"amount"`
		}
		if err := json.Unmarshal(ev.Payload, &body); err != nil {
			return inbox.Permanent(fmt.Errorf("read %s: %w", ev.Type, err))
		}
		delta := body.Amount
		switch ev.Type {
		case "deposited":
		case "withdrawn":
			delta = -delta
		default:
			return inbox.Permanent(fmt.Errorf("unknown event type %q", ev.Type))
		}
		// The inbox holds the aggregate's row lock: no other transaction changes this account meanwhile.
		var version int64
		err := tx.QueryRow(ctx, `SELECT version FROM account_projection WHERE consumer = $1 AND id = $2`,
			consumer, ev.AggregateID).Scan(&version)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if version != ev.AggregateVersion-1 {
			return inbox.Permanent(fmt.Errorf("account %s at version %d got version %d", ev.AggregateID, version, ev.AggregateVersion))
		}
		_, err = tx.Exec(ctx, `INSERT INTO account_projection AS a (consumer, id, balance, version)
			VALUES ($1, $2, $3, $4)
			ON CONFLICT (consumer, id) DO UPDATE SET balance = a.balance + EXCLUDED.balance, version = EXCLUDED.version`,
			consumer, ev.AggregateID, delta, ev.AggregateVersion)
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO apply_counter AS c (consumer, event_id, count) VALUES ($1, $2, 1)
			ON CONFLICT (consumer, event_id) DO UPDATE SET count = c.count + 1`, consumer, ev.ID)
		return err
	}
}

// outcomes writes one line per outcome to stdout.
type outcomes struct{ mu sync.Mutex }

func (o *outcomes) report(ev inbox.Event, res inbox.Result, err error) {
	kind := res.Outcome.String()
	if err != nil {
		kind = "error"
	}
	line := fmt.Sprintf("outcome %s %s %d\n", kind, ev.ID, res.Unparked)
	o.mu.Lock()
	defer o.mu.Unlock()
	os.Stdout.WriteString(line)
}

func run(ctx context.Context, c config, log *slog.Logger) error {
	pc, err := pgxpool.ParseConfig(c.pgURL)
	if err != nil {
		return err
	}
	pc.MaxConns = int32(c.workers + 2)
	db, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer db.Close()
	// Prepare runs once PostgreSQL answers: an instance started while it is down waits in Run.
	prepare := func(ctx context.Context, tx pgx.Tx) error {
		if err := inbox.Migrate(ctx, tx); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, projectionSQL); err != nil {
			return fmt.Errorf("create the projection tables: %w", err)
		}
		return nil
	}
	p, err := inbox.New(db, apply(c.consumer), inbox.Config{Consumer: c.consumer, Prepare: prepare}, log)
	if err != nil {
		return err
	}
	var o outcomes
	r, err := runner.New(p, runner.Config{URLs: strings.Split(c.amqpURL, ","), Quorum: c.quorum, Exchange: c.exchange, Queue: c.queue,
		Bindings: []string{c.binding}, Workers: c.workers, DrainTimeout: 10 * time.Second,
		RetryMin: 50 * time.Millisecond, RetryMax: time.Second, ReconnectMin: 200 * time.Millisecond,
		ReconnectMax: 2 * time.Second, OnOutcome: o.report, Partitions: c.partitions, RebalanceInterval: 500 * time.Millisecond}, log)
	if err != nil {
		return err
	}
	log.Info("accountsconsumer running")
	return r.Run(ctx)
}

func main() {
	c, err := readConfig(os.Args[1:], os.Getenv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := run(ctx, c, log); err != nil {
		log.Error("accountsconsumer stopped", "error", err)
		os.Exit(1)
	}
}
