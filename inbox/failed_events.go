package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// ErrFailedNotFound reports a failed-event id that this consumer has no unresolved record of.
var ErrFailedNotFound = errors.New("no unresolved failed event with this id")

// FailedEvent is one unresolved record of the failed table: an event that did not apply.
type FailedEvent struct {
	ID     int64  // the record's id, which RetryFailed and ResolveFailed take
	Reason string // "conflict", "permanent", "malformed" or "exhausted" (failed MaxAttempts times)
	Detail string // the last error, never the payload
	// Attempts is how many times the event failed: the attempts counted for "exhausted", else how
	// many times the same failure was recorded.
	Attempts      int
	FirstFailedAt time.Time
	LastFailedAt  time.Time
	// Event is the event as received, as far as it could be read (a malformed one may lack its id).
	Event Event

	fingerprint []byte
}

// FailedEvents lists this consumer's unresolved failed events, oldest first, at most limit of them (100
// when limit <= 0).
func (p *Processor) FailedEvents(ctx context.Context, limit int) ([]FailedEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []FailedEvent
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, p.q.listFailed, p.consumer, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (FailedEvent, error) { return scanFailed(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list failed events: %w", err)
	}
	return out, nil
}

// RetryFailed processes a failed event again now, with the handler, as Process would. When that
// settles it (Applied, Duplicate, Stale, or Parked behind a gap of its own) the record is marked
// resolved ('retried') in the same transaction, and the parked events it unblocks are applied. A
// conflict stays a conflict (use ResolveFailed), and a Gap outcome (policy Requeue) leaves the record
// as it is. If the handler fails again the record stays unresolved with the new error and one more
// attempt, and RetryFailed returns the error. A malformed record cannot be retried.
func (p *Processor) RetryFailed(ctx context.Context, id int64) (Result, error) {
	fe, err := p.failedEvent(ctx, id)
	if err != nil {
		return Result{}, err
	}
	ev := fe.Event
	if err := ev.Validate(); err != nil {
		return Result{}, fmt.Errorf("retry failed event %d: %w; it cannot be processed: republish it fixed, "+
			"or mark it handled with ResolveFailed", id, err)
	}
	var res Result
	err = p.inTx(ctx, func(tx pgx.Tx) (err error) {
		if res, err = p.process(ctx, tx, ev); err != nil || res.Outcome == Conflict {
			return err
		}
		return p.markResolved(ctx, tx, id, "retried", "")
	})
	switch {
	case errors.Is(err, errGap):
		return Result{Outcome: Gap}, nil
	case err != nil:
		cause := err
		rerr := p.inTx(ctx, func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, p.q.failedAgain, p.consumer, id, cause.Error())
			return err
		})
		return Result{}, errors.Join(fmt.Errorf("retry failed event %d (%s): %w", id, ev.ID, cause), rerr)
	}
	p.log.Info("inbox failed event retried", "consumer", p.consumer, "failed_id", id, "event_id", ev.ID,
		"outcome", res.Outcome.String(), "unparked", res.Unparked)
	return res, nil
}

// ResolveFailed marks a failed event handled without applying it, with a note for the record. If the
// event is its aggregate's next version, the aggregate's applied version moves past it and the parked
// events after it are applied in the same transaction, so the aggregate is no longer blocked; the
// event's own effect is skipped, for good (a redelivery of it is a Duplicate). Correct the projection
// yourself, or use Repair, if the effect matters. It refuses an event beyond a gap (a full state that
// failed), which skipping would not unblock: retry it, or close the gap first.
func (p *Processor) ResolveFailed(ctx context.Context, id int64, note string) error {
	var unparked int
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		fe, err := p.failedEventTx(ctx, tx, id, true)
		if err != nil {
			return err
		}
		if fe.Reason == reasonPermanent || fe.Reason == reasonExhausted {
			if unparked, err = p.skip(ctx, tx, fe); err != nil {
				return err
			}
		}
		return p.markResolved(ctx, tx, id, "resolved", note)
	})
	if err != nil {
		return fmt.Errorf("resolve failed event %d: %w", id, err)
	}
	p.log.Info("inbox failed event resolved without applying it", "consumer", p.consumer, "failed_id", id,
		"unparked", unparked)
	return nil
}

// skip records a failed event as handled without effect and, when it is its aggregate's next version,
// moves the aggregate past it and applies the parked events that follow. It returns how many it applied.
func (p *Processor) skip(ctx context.Context, tx pgx.Tx, fe FailedEvent) (int, error) {
	ev := fe.Event
	applied, _, err := p.lockAggregate(ctx, tx, ev.AggregateType, ev.AggregateID)
	if err != nil {
		return 0, err
	}
	switch v := ev.AggregateVersion; {
	case v <= applied: // a replay or a repair has moved the aggregate past it already
		return 0, nil
	case v > applied+1:
		return 0, fmt.Errorf("event %s is version %d of %s %s, which is at version %d: skipping it would not "+
			"unblock the aggregate; retry it with RetryFailed, or close the gap first", ev.ID, v,
			ev.AggregateType, ev.AggregateID, applied)
	}
	if _, err := tx.Exec(ctx, p.q.insertSkipped, p.consumer, ev.ID, fe.fingerprint, ev.AggregateType,
		ev.AggregateID, ev.AggregateVersion); err != nil {
		return 0, fmt.Errorf("record skipped event: %w", err)
	}
	if _, err := tx.Exec(ctx, p.q.clearAttempts, p.consumer, ev.ID); err != nil {
		return 0, fmt.Errorf("clear attempts: %w", err)
	}
	applied, n, err := p.unpark(ctx, tx, ev.AggregateType, ev.AggregateID, ev.AggregateVersion)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, p.q.setApplied, p.consumer, ev.AggregateType, ev.AggregateID, applied); err != nil {
		return 0, fmt.Errorf("set applied version: %w", err)
	}
	return n, nil
}

func (p *Processor) markResolved(ctx context.Context, tx pgx.Tx, id int64, resolution, note string) error {
	if _, err := tx.Exec(ctx, p.q.resolveFailed, p.consumer, id, resolution, note); err != nil {
		return fmt.Errorf("mark failed event %d %s: %w", id, resolution, err)
	}
	return nil
}

func (p *Processor) failedEvent(ctx context.Context, id int64) (fe FailedEvent, err error) {
	err = p.inTx(ctx, func(tx pgx.Tx) error {
		fe, err = p.failedEventTx(ctx, tx, id, false)
		return err
	})
	return fe, err
}

// failedEventTx reads one unresolved failed record of this consumer, locked when forUpdate.
func (p *Processor) failedEventTx(ctx context.Context, tx pgx.Tx, id int64, forUpdate bool) (FailedEvent, error) {
	sql := p.q.failedByID
	if forUpdate {
		sql += " FOR UPDATE"
	}
	rows, err := tx.Query(ctx, sql, p.consumer, id)
	if err != nil {
		return FailedEvent{}, fmt.Errorf("read failed event %d: %w", id, err)
	}
	fe, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (FailedEvent, error) { return scanFailed(r) })
	if errors.Is(err, pgx.ErrNoRows) {
		return FailedEvent{}, fmt.Errorf("failed event %d of consumer %q: %w", id, p.consumer, ErrFailedNotFound)
	}
	if err != nil {
		return FailedEvent{}, fmt.Errorf("read failed event %d: %w", id, err)
	}
	return fe, nil
}

// scanFailed reads a row of failedColumns.
func scanFailed(r pgx.Row) (FailedEvent, error) {
	var fe FailedEvent
	ev := &fe.Event
	var lsn *string
	err := r.Scan(&fe.ID, &fe.Reason, &fe.Detail, &ev.ID, &ev.AggregateType, &ev.AggregateID,
		&ev.AggregateVersion, &ev.Type, &ev.SchemaVersion, &lsn, &ev.Backfill, &ev.FullState, &ev.Payload,
		&ev.Headers, &fe.fingerprint, &fe.Attempts, &fe.FirstFailedAt, &fe.LastFailedAt)
	if err != nil {
		return FailedEvent{}, err
	}
	if lsn != nil {
		l, err := cdc.ParseLSN(*lsn)
		if err != nil {
			return FailedEvent{}, fmt.Errorf("failed event %d: %w", fe.ID, err)
		}
		ev.CommitLSN = uint64(l)
	}
	return fe, nil
}
