package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// ErrParkedNotFound reports an event id that this consumer has no parked event of.
var ErrParkedNotFound = errors.New("no parked event with this id")

// ParkedEvent is one event of the parked table: it arrived ahead of a gap in its aggregate's versions
// and waits for the missing ones.
type ParkedEvent struct {
	Event    Event // as received
	ParkedAt time.Time
	// Applied is its aggregate's applied version: versions Applied+1 up to Event.AggregateVersion-1
	// have not been applied (not received, or failed: see FailedEvents).
	Applied int64
}

// Missing is how many versions are missing before the event.
func (e ParkedEvent) Missing() int64 { return e.Event.AggregateVersion - e.Applied - 1 }

// ParkedEvents lists this consumer's parked events, oldest first, at most limit of them (100 when
// limit <= 0).
func (p *Processor) ParkedEvents(ctx context.Context, limit int) ([]ParkedEvent, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []ParkedEvent
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, p.q.listParked, p.consumer, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (ParkedEvent, error) { return scanParked(r) })
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list parked events: %w", err)
	}
	return out, nil
}

// RetryParked applies the parked events of eventID's aggregate that follow its applied version
// without a gap, with the handler, as the transaction closing their gap would. It returns Applied
// (Result.Unparked counts them) when the event itself was applied, and Parked when its gap is still
// open, which changes nothing. An event whose handler fails for good moves to the failed table, as in
// the closing transaction; another failure is returned and nothing is committed.
func (p *Processor) RetryParked(ctx context.Context, eventID string) (Result, error) {
	return p.settleParked(ctx, eventID, settle{})
}

// ResolveParked gives up the versions missing before a parked event: its aggregate's applied version
// moves to the version just below it, and the event and the parked events that follow it without a gap
// are applied with the handler, in one transaction. The missing versions are skipped for good and
// remembered (table skipped): one that arrives later is not applied but recorded in the failed table
// (reason "skipped") with a warning, so correct the projection yourself, or use Repair, if their effect
// matters. The note and the skipped versions are logged. Use it when the missing event cannot come:
// dead-lettered past a delivery limit, expired, purged, or discarded from the router's quarantine.
func (p *Processor) ResolveParked(ctx context.Context, eventID, note string) (Result, error) {
	return p.settleParked(ctx, eventID, settle{skipGap: true, note: note})
}

// settle is how settleParked settles a parked event.
type settle struct {
	skipGap bool   // resolve: give up the missing versions
	note    string // the operator's, kept with the skipped versions
	request int64  // the request carrying it out, 0 for a direct call
	// premise, for a request, is the aggregate's applied version when it was filed, at filedAt: a
	// resolve is refused (RefusedError) if it moved or a missing version arrived after filedAt.
	premise *int64
	filedAt time.Time
}

func (p *Processor) settleParked(ctx context.Context, eventID string, how settle) (Result, error) {
	skipGap, note := how.skipGap, how.note
	what := "retry"
	if skipGap {
		what = "resolve"
	}
	var res Result
	var pe ParkedEvent
	err := p.inTx(ctx, func(tx pgx.Tx) (err error) {
		if pe, err = p.parkedEvent(ctx, tx, eventID); err != nil {
			return err
		}
		ev := pe.Event
		applied, _, err := p.lockAggregate(ctx, tx, ev.AggregateType, ev.AggregateID)
		if err != nil {
			return err
		}
		pe.Applied = applied
		from := applied
		if skipGap && ev.AggregateVersion-1 > applied {
			if err := p.checkPremise(ctx, tx, ev, applied, how); err != nil {
				return err
			}
			from = ev.AggregateVersion - 1
			if _, err := tx.Exec(ctx, p.q.skip, p.consumer, ev.AggregateType, ev.AggregateID, applied+1, from,
				ev.ID, how.request, note); err != nil {
				return fmt.Errorf("record skipped versions: %w", err)
			}
		}
		final, n, err := p.unpark(ctx, tx, ev.AggregateType, ev.AggregateID, from)
		if err != nil {
			return err
		}
		if final != applied {
			if _, err := tx.Exec(ctx, p.q.setApplied, p.consumer, ev.AggregateType, ev.AggregateID, final); err != nil {
				return fmt.Errorf("set applied version: %w", err)
			}
		}
		res = Result{Outcome: Parked, Version: final, Unparked: n}
		if final >= ev.AggregateVersion {
			res.Outcome = Applied
		}
		return nil
	})
	if err != nil {
		return Result{}, fmt.Errorf("%s parked event %s: %w", what, eventID, err)
	}
	ev := pe.Event
	attrs := []any{"consumer", p.consumer, "event_id", eventID, "aggregate_type", ev.AggregateType,
		"aggregate_id", ev.AggregateID, "version", ev.AggregateVersion, "outcome", res.Outcome.String(),
		"unparked", res.Unparked}
	if skipGap && pe.Missing() > 0 {
		p.log.Warn("inbox parked event resolved: the versions before it were skipped", append(attrs,
			"skipped_from", pe.Applied+1, "skipped_to", ev.AggregateVersion-1, "request_id", how.request,
			"note", note)...)
	} else {
		p.log.Info("inbox parked event retried", attrs...)
	}
	return res, nil
}

// parkedEvent reads one parked event of this consumer.
func (p *Processor) parkedEvent(ctx context.Context, tx pgx.Tx, eventID string) (ParkedEvent, error) {
	rows, err := tx.Query(ctx, p.q.parkedByID, p.consumer, eventID)
	if err != nil {
		return ParkedEvent{}, fmt.Errorf("read parked event: %w", err)
	}
	pe, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) (ParkedEvent, error) { return scanParked(r) })
	if errors.Is(err, pgx.ErrNoRows) {
		return ParkedEvent{}, fmt.Errorf("consumer %q: %w", p.consumer, ErrParkedNotFound)
	}
	if err != nil {
		return ParkedEvent{}, fmt.Errorf("read parked event: %w", err)
	}
	return pe, nil
}

// scanParked reads a row of parkedColumns.
func scanParked(r pgx.Row) (ParkedEvent, error) {
	var pe ParkedEvent
	ev := &pe.Event
	var lsn *string
	err := r.Scan(&ev.ID, &ev.AggregateType, &ev.AggregateID, &ev.AggregateVersion, &ev.Type, &ev.SchemaVersion,
		&lsn, &ev.Backfill, &ev.Payload, &ev.Headers, &pe.ParkedAt, &pe.Applied)
	if err != nil {
		return ParkedEvent{}, err
	}
	if lsn != nil {
		l, err := cdc.ParseLSN(*lsn)
		if err != nil {
			return ParkedEvent{}, fmt.Errorf("parked event %s: %w", ev.ID, err)
		}
		ev.CommitLSN = uint64(l)
	}
	return pe, nil
}
