package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// park stores an event that is ahead of a gap, whole, and marks its inbox row parked. A parked row is
// never taken for an applied one: it becomes applied or stale only in the transaction that closes the
// gap (unpark), so a redelivery of a parked event is a duplicate and loses nothing.
func (p *Processor) park(ctx context.Context, tx pgx.Tx, ev Event) error {
	headers := ev.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	_, err := tx.Exec(ctx, p.q.park, p.consumer, ev.ID, ev.AggregateType, ev.AggregateID, ev.AggregateVersion, ev.Type,
		ev.SchemaVersion, lsnText(ev.CommitLSN), ev.Backfill, ev.Payload, headers)
	if err != nil {
		return fmt.Errorf("park event: %w", err)
	}
	if _, err := tx.Exec(ctx, p.q.setStatus, p.consumer, ev.ID, "parked"); err != nil {
		return fmt.Errorf("mark event parked: %w", err)
	}
	return nil
}

// unpark applies, in version order, the parked events of an aggregate that follow version applied
// without a gap, and turns the parked events at or below the final version into stale ones. It returns
// the new applied version and how many parked events it applied. Each parked event runs under a
// savepoint: one its handler rejects as permanent, or fails for the MaxAttempts-th time, is moved to the
// failed table (its inbox row removed, so a fixed replay is processed) and the gap stays open there,
// without undoing the event that closed the previous gap.
func (p *Processor) unpark(ctx context.Context, tx pgx.Tx, typ, id string, applied int64) (int64, int, error) {
	n := 0
	for {
		ev, ok, err := p.takeParked(ctx, tx, typ, id, applied+1)
		if err != nil {
			return 0, 0, err
		}
		if !ok {
			break
		}
		ok, err = p.applyParked(ctx, tx, ev)
		if err != nil {
			return 0, 0, err
		}
		if !ok {
			break
		}
		applied++
		n++
	}
	if _, err := tx.Exec(ctx, p.q.dropStaleParked, p.consumer, typ, id, applied); err != nil {
		return 0, 0, fmt.Errorf("drop stale parked events: %w", err)
	}
	return applied, n, nil
}

// applyParked runs the handler for a parked event under a savepoint. It reports false when the event
// was moved to the failed table instead: its handler rejected it as permanent, or failed for the
// MaxAttempts-th time. Another failure is returned as a parkedError, counted for this event.
func (p *Processor) applyParked(ctx context.Context, tx pgx.Tx, ev Event) (bool, error) {
	sp, err := tx.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("savepoint: %w", err)
	}
	herr := p.handler(ctx, sp, ev)
	if herr == nil {
		if err := sp.Commit(ctx); err != nil {
			return false, fmt.Errorf("release savepoint: %w", err)
		}
		if _, err := tx.Exec(ctx, p.q.markApplied, p.consumer, ev.ID); err != nil {
			return false, fmt.Errorf("mark parked event applied: %w", err)
		}
		return true, nil
	}
	if err := sp.Rollback(ctx); err != nil {
		return false, fmt.Errorf("roll back to savepoint: %w", err)
	}
	if IsPermanent(herr) {
		if err := p.recordFailed(ctx, tx, ev, reasonPermanent, herr.Error(), nil, 1); err != nil {
			return false, err
		}
		p.log.Error("inbox parked event failed permanently", "consumer", p.consumer, "event_id", ev.ID,
			"aggregate_type", ev.AggregateType, "aggregate_id", ev.AggregateID, "version", ev.AggregateVersion,
			"error", herr)
	} else if err := p.exhaustParked(ctx, tx, ev, herr); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, p.q.deleteInbox, p.consumer, ev.ID); err != nil {
		return false, fmt.Errorf("remove failed parked event from the inbox: %w", err)
	}
	return false, nil
}

// exhaustParked moves a parked event whose handler failed with a non-permanent error to the failed
// table if this was its MaxAttempts-th counted failure, and otherwise returns a parkedError.
func (p *Processor) exhaustParked(ctx context.Context, tx pgx.Tx, ev Event, herr error) error {
	wrapped := &parkedError{eventID: ev.ID, err: fmt.Errorf("handle parked event %s: %w", ev.ID, herr)}
	if !countsAsAttempt(ctx, herr) || p.cfg.MaxAttempts < 0 {
		return wrapped
	}
	var prior int
	if err := tx.QueryRow(ctx, p.q.attempts, p.consumer, ev.ID).Scan(&prior); err != nil {
		return fmt.Errorf("read attempts of parked event %s: %w", ev.ID, err)
	}
	if prior+1 < p.cfg.MaxAttempts {
		return wrapped
	}
	if err := p.exhaust(ctx, tx, ev, prior+1, herr); err != nil {
		return err
	}
	p.logExhausted(ev, prior+1, herr)
	return nil
}

// takeParked deletes and returns one parked event of the aggregate at version v, if there is one.
func (p *Processor) takeParked(ctx context.Context, tx pgx.Tx, typ, id string, v int64) (Event, bool, error) {
	ev := Event{AggregateType: typ, AggregateID: id}
	var lsn *string
	err := tx.QueryRow(ctx, p.q.takeParked, p.consumer, typ, id, v).Scan(&ev.ID, &ev.AggregateVersion, &ev.Type,
		&ev.SchemaVersion, &lsn, &ev.Backfill, &ev.Payload, &ev.Headers)
	if errors.Is(err, pgx.ErrNoRows) {
		return Event{}, false, nil
	}
	if err != nil {
		return Event{}, false, fmt.Errorf("take parked event: %w", err)
	}
	if lsn != nil {
		l, err := cdc.ParseLSN(*lsn)
		if err != nil {
			return Event{}, false, fmt.Errorf("parked event %s: %w", ev.ID, err)
		}
		ev.CommitLSN = uint64(l)
	}
	return ev, true, nil
}

// lsnText is the pg_lsn text of l, or nil (SQL NULL) for zero.
func lsnText(l uint64) any {
	if l == 0 {
		return nil
	}
	return cdc.LSN(l).String()
}
