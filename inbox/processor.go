package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"

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

// Processor processes events exactly once per event id and in per-aggregate version order, each in one
// PostgreSQL transaction together with the handler's writes. It is safe for concurrent use when its
// Beginner is.
type Processor struct {
	db      Beginner
	handler Handler
	cfg     Config
	q       queries
	log     *slog.Logger
}

// errGap rolls back the transaction of an event ahead of a gap under policy Requeue.
var errGap = errors.New("event is ahead of a gap")

// New returns a Processor that applies events with handler. The tables must exist (Migrate). A nil
// logger discards logs.
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
	return &Processor{db: db, handler: handler, cfg: cfg, q: newQueries(cfg.Schema), log: log}, nil
}

// Process records ev in the inbox and applies it, all in one transaction, and reports the outcome. It
// commits before it returns, so the caller acknowledges the delivery only after a nil error and an
// outcome whose Ack is true. On an error nothing was committed (the inbox row is rolled back with the
// business write) and the delivery must be requeued. Malformed events and handler errors wrapped with
// Permanent are recorded in the failed table and returned as the Failed outcome.
func (p *Processor) Process(ctx context.Context, ev Event) (Result, error) {
	if err := ev.Validate(); err != nil {
		return p.fail(ctx, ev, reasonMalformed, err)
	}
	var res Result
	err := p.inTx(ctx, func(tx pgx.Tx) (err error) {
		res, err = p.process(ctx, tx, ev)
		return err
	})
	switch {
	case errors.Is(err, errGap):
		res = Result{Outcome: Gap}
	case IsPermanent(err):
		return p.fail(ctx, ev, reasonPermanent, err)
	case err != nil:
		return Result{}, fmt.Errorf("process event %s: %w", ev.ID, err)
	}
	p.log.Debug("inbox event processed", "event_id", ev.ID, "aggregate_type", ev.AggregateType,
		"aggregate_id", ev.AggregateID, "version", ev.AggregateVersion, "outcome", res.Outcome.String(),
		"unparked", res.Unparked)
	return res, nil
}

func (p *Processor) process(ctx context.Context, tx pgx.Tx, ev Event) (Result, error) {
	fp := ev.Fingerprint()
	tag, err := tx.Exec(ctx, p.q.insertInbox, ev.ID, fp, ev.AggregateType, ev.AggregateID, ev.AggregateVersion)
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
		if _, err := tx.Exec(ctx, p.q.setStatus, ev.ID, "stale"); err != nil {
			return Result{}, fmt.Errorf("mark event stale: %w", err)
		}
		return Result{Outcome: Stale, Version: applied}, nil
	case v == applied+1:
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
	if err := tx.QueryRow(ctx, p.q.inboxEntry, ev.ID).Scan(&stored); err != nil {
		return Result{}, fmt.Errorf("read inbox fingerprint: %w", err)
	}
	if bytes.Equal(stored, fp) {
		return Result{Outcome: Duplicate}, nil
	}
	detail := "same event id, different content"
	if err := p.recordFailed(ctx, tx, ev, reasonConflict, detail, stored); err != nil {
		return Result{}, err
	}
	p.log.Warn("inbox conflict: event id seen before with different content", "event_id", ev.ID,
		"aggregate_type", ev.AggregateType, "aggregate_id", ev.AggregateID)
	return Result{Outcome: Conflict}, nil
}

// apply runs the handler for the next version, then every parked event it unblocks, and moves the
// aggregate's applied version.
func (p *Processor) apply(ctx context.Context, tx pgx.Tx, ev Event) (Result, error) {
	if err := p.handler(ctx, tx, ev); err != nil {
		return Result{}, fmt.Errorf("handle event %s: %w", ev.ID, err)
	}
	applied, n, err := p.unpark(ctx, tx, ev.AggregateType, ev.AggregateID, ev.AggregateVersion)
	if err != nil {
		return Result{}, err
	}
	if _, err := tx.Exec(ctx, p.q.setApplied, ev.AggregateType, ev.AggregateID, applied); err != nil {
		return Result{}, fmt.Errorf("set applied version: %w", err)
	}
	return Result{Outcome: Applied, Version: applied, Unparked: n}, nil
}

// lockAggregate creates the aggregate's state row if needed and locks it for this transaction, so that
// events and repairs of one aggregate are decided one at a time against its latest committed state.
func (p *Processor) lockAggregate(ctx context.Context, tx pgx.Tx, typ, id string) (applied, baseline int64, err error) {
	if _, err := tx.Exec(ctx, p.q.ensureAggregate, typ, id); err != nil {
		return 0, 0, fmt.Errorf("create aggregate state: %w", err)
	}
	if err := tx.QueryRow(ctx, p.q.lockAggregate, typ, id).Scan(&applied, &baseline); err != nil {
		return 0, 0, fmt.Errorf("lock aggregate state: %w", err)
	}
	return applied, baseline, nil
}

// inTx runs fn in a read-committed transaction and commits when fn returns nil.
func (p *Processor) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// AggregateState is the inbox's view of one aggregate's projection.
type AggregateState struct {
	Applied  int64 // last version applied; 0 when nothing has been
	Baseline int64 // version of the last trusted full snapshot applied by Repair; 0 when none
}

// State reads the applied and baseline versions of an aggregate (zeros when it has none). A repairer
// reads it before fetching a snapshot and passes Applied to Repair as the observed version.
func (p *Processor) State(ctx context.Context, aggregateType, aggregateID string) (AggregateState, error) {
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return AggregateState{}, fmt.Errorf("read aggregate state: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var s AggregateState
	err = tx.QueryRow(ctx, p.q.state, aggregateType, aggregateID).Scan(&s.Applied, &s.Baseline)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return AggregateState{}, fmt.Errorf("read aggregate state: %w", err)
	}
	return s, nil
}
