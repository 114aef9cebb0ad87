package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
)

// Handler applies one event to the consumer's projection inside tx, the transaction that also records
// the event in the inbox. It must do all of its database work through tx and nothing irreversible
// outside it (see docs/consumers.md for external side effects). Returning an error rolls everything
// back; wrap it with Permanent when redelivery cannot fix it.
type Handler func(ctx context.Context, tx pgx.Tx, ev Event) error

// Beginner starts a transaction. *pgx.Conn and *pgxpool.Pool satisfy it; give a Processor used by
// several goroutines a pool.
type Beginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// Processor processes the events of one consumer (Config.Consumer) exactly once per event id and in
// per-aggregate version order, each in one PostgreSQL transaction together with the handler's writes.
// It is safe for concurrent use when its Beginner is.
type Processor struct {
	db       Beginner
	handler  Handler
	cfg      Config
	consumer string
	q        queries
	timeouts string // the SET LOCAL of every transaction; "" when both timeouts are left to the session
	log      *slog.Logger
	ready    atomic.Bool // Prepare and Check passed
}

// errGap rolls back the transaction of an event ahead of a gap under policy Requeue.
var errGap = errors.New("event is ahead of a gap")

// New returns a Processor that applies events with handler. It runs Config.Prepare and checks, with a
// query bounded by checkTimeout, that the inbox tables exist in an up-to-date form (Check), and logs a
// warning when the schema holds records from before consumer names (AdoptRecords). When PostgreSQL
// does not answer (not started yet, starting up, unreachable) New logs it and returns the Processor
// anyway: runner.Runner.Run (package inbox/runner) waits for PostgreSQL and runs both then, and Process runs them first and fails
// until they pass. A schema that is missing or out of date is refused either way. A nil logger
// discards logs.
func New(db Beginner, handler Handler, cfg Config, log *slog.Logger) (*Processor, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if db == nil || handler == nil {
		return nil, fmt.Errorf("inbox: New needs a database and a handler")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Processor{db: db, handler: handler, cfg: cfg, consumer: cfg.Consumer, q: newQueries(cfg.Schema),
		timeouts: timeoutsSQL(cfg.LockTimeout, cfg.StatementTimeout), log: log}
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	if err := p.Prepare(ctx); err != nil {
		if !Unreachable(err) {
			return nil, err
		}
		log.Warn("inbox: PostgreSQL does not answer; the schema check waits for it", "consumer", cfg.Consumer,
			"error", err)
	}
	return p, nil
}

// Process records ev in the inbox and applies it, all in one transaction, and reports the outcome. It
// commits before it returns, so the caller acknowledges the delivery only after a nil error and an
// outcome whose Ack is true. On an error nothing was committed (the inbox row is rolled back with the
// business write) and the delivery must be requeued; the failed attempt was counted (FailedAttempts),
// and the attempt that reaches Config.MaxAttempts records the event in the failed table and returns
// the Failed outcome instead. Malformed events and handler errors wrapped with Permanent are recorded
// in the failed table and returned as the Failed outcome.
func (p *Processor) Process(ctx context.Context, ev Event) (Result, error) {
	if !p.ready.Load() {
		if err := p.Prepare(ctx); err != nil {
			return Result{}, err
		}
	}
	if err := ev.Validate(); err != nil {
		return p.fail(ctx, ev, reasonMalformed, err)
	}
	var res Result
	err := p.inTx(ctx, func(tx pgx.Tx) (err error) {
		res, err = p.process(ctx, tx, ev)
		return err
	})
	var skipped *skippedVersion
	switch {
	case errors.Is(err, errGap):
		res = Result{Outcome: Gap}
	case errors.As(err, &skipped):
		return p.failSkipped(ctx, ev, skipped)
	case IsPermanent(err):
		return p.fail(ctx, ev, reasonPermanent, err)
	case err != nil:
		return p.failedAttempt(ctx, ev, err)
	}
	p.log.Debug("inbox event processed", "consumer", p.consumer, "event_id", ev.ID, "aggregate_type",
		ev.AggregateType, "aggregate_id", ev.AggregateID, "version", ev.AggregateVersion, "full_state",
		ev.FullState, "outcome", res.Outcome.String(), "unparked", res.Unparked)
	return res, nil
}

func (p *Processor) process(ctx context.Context, tx pgx.Tx, ev Event) (Result, error) {
	fp := ev.Fingerprint()
	tag, err := tx.Exec(ctx, p.q.insertInbox, p.consumer, ev.ID, fp, ev.AggregateType, ev.AggregateID,
		ev.AggregateVersion)
	if err != nil {
		return Result{}, fmt.Errorf("insert inbox row: %w", err)
	}
	if tag.RowsAffected() == 0 {
		return p.duplicate(ctx, tx, ev, fp)
	}
	applied, baseline, err := p.lockAggregate(ctx, tx, ev.AggregateType, ev.AggregateID)
	if err != nil {
		return Result{}, err
	}
	v := ev.AggregateVersion
	switch {
	case v <= applied || v <= baseline:
		if v > baseline { // a version a resolve gave up is not a stale duplicate; a trusted snapshot covers it
			s, err := p.skippedAt(ctx, tx, ev)
			if err != nil {
				return Result{}, err
			}
			if s != nil {
				return Result{}, s
			}
		}
		if _, err := tx.Exec(ctx, p.q.setStatus, p.consumer, ev.ID, "stale"); err != nil {
			return Result{}, fmt.Errorf("mark event stale: %w", err)
		}
		return Result{Outcome: Stale, Version: applied}, nil
	case v == applied+1 || ev.FullState: // a full state replaces everything before it, gap or not
		return p.apply(ctx, tx, ev)
	case p.cfg.OnGap == Requeue:
		return Result{}, errGap
	default:
		if err := p.park(ctx, tx, ev); err != nil {
			return Result{}, err
		}
		return Result{Outcome: Parked, Version: applied}, nil
	}
}

// duplicate handles an event id already in the inbox: the same fingerprint is a duplicate, a different
// one a conflict, recorded in the failed table in this transaction.
func (p *Processor) duplicate(ctx context.Context, tx pgx.Tx, ev Event, fp []byte) (Result, error) {
	var stored []byte
	if err := tx.QueryRow(ctx, p.q.inboxEntry, p.consumer, ev.ID).Scan(&stored); err != nil {
		return Result{}, fmt.Errorf("read inbox fingerprint: %w", err)
	}
	if bytes.Equal(stored, fp) {
		return Result{Outcome: Duplicate}, nil
	}
	detail := "same event id, different content"
	if err := p.recordFailed(ctx, tx, ev, reasonConflict, detail, stored, 1); err != nil {
		return Result{}, err
	}
	p.log.Warn("inbox conflict: event id seen before with different content", "consumer", p.consumer,
		"event_id", ev.ID, "aggregate_type", ev.AggregateType, "aggregate_id", ev.AggregateID)
	return Result{Outcome: Conflict}, nil
}

// apply runs the handler for ev (the next version, or a full state at any newer version), then every
// parked event it unblocks, and moves the aggregate's applied version. Parked events at or below the
// final version become stale.
func (p *Processor) apply(ctx context.Context, tx pgx.Tx, ev Event) (Result, error) {
	if err := p.handler(ctx, tx, ev); err != nil {
		return Result{}, fmt.Errorf("handle event %s: %w", ev.ID, err)
	}
	applied, n, err := p.unpark(ctx, tx, ev.AggregateType, ev.AggregateID, ev.AggregateVersion)
	if err != nil {
		return Result{}, err
	}
	if _, err := tx.Exec(ctx, p.q.setApplied, p.consumer, ev.AggregateType, ev.AggregateID, applied); err != nil {
		return Result{}, fmt.Errorf("set applied version: %w", err)
	}
	return Result{Outcome: Applied, Version: applied, Unparked: n}, nil
}

// Config returns the Processor's configuration, with every default filled in.
func (p *Processor) Config() Config { return p.cfg }

// Logger returns the logger the Processor was built with (a discarding one for nil), for the loop
// that feeds it deliveries.
func (p *Processor) Logger() *slog.Logger { return p.log }
