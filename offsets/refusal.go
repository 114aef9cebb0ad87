package offsets

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// RefusedEvent names a streamed event across replays of the stream, whichever process of the slot decodes
// it: its transaction's commit LSN, the WAL start of its insert and its ordinal there (cdc.Event's LSN and
// Ordinal), and its outbox id. The zero value names no event.
type RefusedEvent struct {
	CommitLSN cdc.LSN
	LSN       cdc.LSN
	Ordinal   int
	ID        string
}

// Refused names ev.
func Refused(ev cdc.Event) RefusedEvent {
	return RefusedEvent{CommitLSN: ev.CommitLSN, LSN: ev.LSN, Ordinal: ev.Ordinal, ID: ev.ID}
}

// Zero reports whether e names no event.
func (e RefusedEvent) Zero() bool { return e == RefusedEvent{} }

// Key is e as one string, the key of its strikes in a cdc.Refusals.
func (e RefusedEvent) Key() string {
	if e.Zero() {
		return ""
	}
	return fmt.Sprintf("%s at %s#%d (commit %s)", e.ID, e.LSN, e.Ordinal, e.CommitLSN)
}

// Refusal is the stream's safety net as the slot's stored record keeps it (migration 018), so that it
// lives with the slot rather than with one process: the restarts of a router, and the other router of
// its slot when it takes over, go on counting where the last run stopped.
type Refusal struct {
	// Until is the WAL position up to which the events are published one at a time after a per-message
	// refusal (0: none); it only grows.
	Until cdc.LSN
	// Event is the event the broker refused while it was the only message in flight, Strikes how many times
	// in a row, First and Last when the first and the last of them were recorded (PostgreSQL's clock, so the
	// two routers of a slot measure --refusal-retry on one clock), Reason the broker's last words and
	// Settles whether the broker's state may end the refusal (cdc.BrokerState). Zero when no event has
	// strikes.
	Event       RefusedEvent
	Strikes     int
	First, Last time.Time
	Reason      string
	Settles     bool
}

// refusalColumns are the record's columns, in Refusal's order.
const refusalColumns = `refusal_until::text, refusal_commit_lsn::text, refusal_lsn::text, refusal_ordinal, refusal_event_id,
	refusal_strikes, refusal_first, refusal_last, refusal_reason, refusal_settles`

// sameRefused is true when the stored record's event is the one of the parameters from $n (its id, commit
// LSN, LSN and ordinal).
func sameRefused(n int) string {
	return fmt.Sprintf(`coalesce(p.refusal_event_id = $%d AND p.refusal_commit_lsn = $%d::pg_lsn AND p.refusal_lsn = $%d::pg_lsn
	AND p.refusal_ordinal = $%d, false)`, n, n+1, n+2, n+3)
}

// LoadRefusal returns the slot's stored safety net; ok is false when the slot has no stored position (its
// row holds the record).
func (s *Store) LoadRefusal(ctx context.Context) (r Refusal, ok bool, err error) {
	r, err = scanRefusal(s.conn.QueryRow(ctx, "SELECT "+refusalColumns+" FROM "+s.table+" WHERE slot = $1", s.slot))
	if errors.Is(err, pgx.ErrNoRows) {
		return Refusal{}, false, nil
	}
	if err != nil {
		return Refusal{}, false, fmt.Errorf("load the stored refusal: %w", err)
	}
	return r, true, nil
}

// Strike records in the slot's stored record a per-message refusal of ev, the only message in flight
// (none when ev is zero), and the position until which the events go one at a time: a strike more when
// the record's event is ev, else ev's first strike, replacing the record of another event. It returns the
// record as stored; ok is false when the slot has no stored position, and nothing was written.
func (s *Store) Strike(ctx context.Context, until cdc.LSN, ev RefusedEvent, reason string, settles bool) (r Refusal, ok bool, err error) {
	var row pgx.Row
	if ev.Zero() {
		row = s.conn.QueryRow(ctx, "UPDATE "+s.table+` AS p SET refusal_until = GREATEST(coalesce(p.refusal_until, '0/0'), $2::pg_lsn)
			WHERE slot = $1 RETURNING `+refusalColumns, s.slot, until.String())
	} else {
		row = s.conn.QueryRow(ctx, "UPDATE "+s.table+` AS p SET refusal_until = GREATEST(coalesce(p.refusal_until, '0/0'), $2::pg_lsn),
				refusal_strikes = CASE WHEN `+sameRefused(3)+` THEN p.refusal_strikes + 1 ELSE 1 END,
				refusal_first = CASE WHEN `+sameRefused(3)+` THEN p.refusal_first ELSE now() END,
				refusal_last = now(), refusal_reason = $7, refusal_settles = $8,
				refusal_event_id = $3, refusal_commit_lsn = $4::pg_lsn, refusal_lsn = $5::pg_lsn, refusal_ordinal = $6
			WHERE slot = $1 RETURNING `+refusalColumns,
			s.slot, until.String(), ev.ID, ev.CommitLSN.String(), ev.LSN.String(), ev.Ordinal, reason, settles)
	}
	r, err = scanRefusal(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return Refusal{}, false, nil
	}
	if err != nil {
		return Refusal{}, false, fmt.Errorf("store a refusal: %w", err)
	}
	return r, true, nil
}

// ClearRefusal forgets the strikes of ev (published, or quarantined) when the slot's stored record has
// them, and keeps Until; it reports whether it did.
func (s *Store) ClearRefusal(ctx context.Context, ev RefusedEvent) (bool, error) {
	tag, err := s.conn.Exec(ctx, "UPDATE "+s.table+` AS p SET refusal_commit_lsn = NULL, refusal_lsn = NULL,
			refusal_ordinal = NULL, refusal_event_id = NULL, refusal_strikes = NULL, refusal_first = NULL,
			refusal_last = NULL, refusal_reason = NULL, refusal_settles = NULL
		WHERE slot = $1 AND `+sameRefused(2), s.slot, ev.ID, ev.CommitLSN.String(), ev.LSN.String(), ev.Ordinal)
	if err != nil {
		return false, fmt.Errorf("clear the stored refusal: %w", err)
	}
	return tag.RowsAffected() > 0, nil
}

// scanRefusal reads the record's columns (refusalColumns); an event without all of its columns, or without
// a strike, is left out.
func scanRefusal(row pgx.Row) (Refusal, error) {
	var until, commit, lsn, id, reason *string
	var ordinal, strikes *int32
	var first, last *time.Time
	var settles *bool
	if err := row.Scan(&until, &commit, &lsn, &ordinal, &id, &strikes, &first, &last, &reason, &settles); err != nil {
		return Refusal{}, err
	}
	var r Refusal
	var err error
	if until != nil {
		if r.Until, err = cdc.ParseLSN(*until); err != nil {
			return Refusal{}, err
		}
	}
	if commit == nil || lsn == nil || ordinal == nil || id == nil || strikes == nil || *strikes <= 0 || first == nil ||
		last == nil || reason == nil || settles == nil {
		return r, nil
	}
	if r.Event.CommitLSN, err = cdc.ParseLSN(*commit); err != nil {
		return Refusal{}, err
	}
	if r.Event.LSN, err = cdc.ParseLSN(*lsn); err != nil {
		return Refusal{}, err
	}
	r.Event.Ordinal, r.Event.ID = int(*ordinal), *id
	r.Strikes, r.First, r.Last, r.Reason, r.Settles = int(*strikes), *first, *last, *reason, *settles
	return r, nil
}
