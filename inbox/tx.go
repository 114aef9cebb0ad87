package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// timeoutsSQL is the statement that sets the lock and statement timeouts of one transaction, or "" when
// both are negative (left to the session). Values are whole milliseconds, at least 1.
func timeoutsSQL(lock, statement time.Duration) string {
	var set []string
	for _, t := range []struct {
		name string
		d    time.Duration
	}{{"lock_timeout", lock}, {"statement_timeout", statement}} {
		if t.d > 0 {
			ms := max(1, (t.d+time.Millisecond-1)/time.Millisecond)
			set = append(set, fmt.Sprintf("set_config('%s', '%dms', true)", t.name, ms))
		}
	}
	if len(set) == 0 {
		return ""
	}
	return "SELECT " + strings.Join(set, ", ")
}

// inTx runs fn in a read-committed transaction with the configured lock and statement timeouts, and
// commits when fn returns nil.
func (p *Processor) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return p.inTxWith(ctx, p.timeouts, fn)
}

// inTxWith runs fn in a read-committed transaction that first runs timeouts (timeoutsSQL), and commits
// when fn returns nil.
func (p *Processor) inTxWith(ctx context.Context, timeouts string, fn func(tx pgx.Tx) error) error {
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{})
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // a no-op after Commit
	if timeouts != "" {
		if _, err := tx.Exec(ctx, timeouts); err != nil {
			return fmt.Errorf("set timeouts: %w", err)
		}
	}
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// lockAggregate creates the aggregate's state row if needed and locks it for this transaction, so that
// events and repairs of one aggregate are decided one at a time against its latest committed state.
// The wait is bounded by Config.LockTimeout.
func (p *Processor) lockAggregate(ctx context.Context, tx pgx.Tx, typ, id string) (applied, baseline int64, err error) {
	if _, err := tx.Exec(ctx, p.q.ensureAggregate, p.consumer, typ, id); err != nil {
		return 0, 0, fmt.Errorf("create aggregate state: %w", err)
	}
	if err := tx.QueryRow(ctx, p.q.lockAggregate, p.consumer, typ, id).Scan(&applied, &baseline); err != nil {
		return 0, 0, fmt.Errorf("lock aggregate state: %w", err)
	}
	return applied, baseline, nil
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
	err = tx.QueryRow(ctx, p.q.state, p.consumer, aggregateType, aggregateID).Scan(&s.Applied, &s.Baseline)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return AggregateState{}, fmt.Errorf("read aggregate state: %w", err)
	}
	return s, nil
}
