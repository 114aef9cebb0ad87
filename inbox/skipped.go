package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// skippedVersion is a version an operator gave up (ResolveParked) that arrived after all: the error
// that rolls back its inbox row, so that Process records it in the failed table instead.
type skippedVersion struct {
	from, to int64
	eventID  string // the parked event whose resolve skipped it
	request  int64  // the request that did, 0 for a direct ResolveParked
	note     string
	at       time.Time
}

func (e *skippedVersion) Error() string {
	by := "ResolveParked"
	if e.request != 0 {
		by = fmt.Sprintf("inbox request %d", e.request)
	}
	return fmt.Sprintf("this version was skipped at %s by %s (resolve of parked event %s, versions %d to %d, note %q) "+
		"and arrived afterwards: it was not applied; correct the projection if its effect matters, then resolve "+
		"this record", e.at.UTC().Format(time.RFC3339), by, e.eventID, e.from, e.to, e.note)
}

// skippedAt reports the skip that gave up version v of ev's aggregate, if one did.
func (p *Processor) skippedAt(ctx context.Context, tx pgx.Tx, ev Event) (*skippedVersion, error) {
	var s skippedVersion
	err := tx.QueryRow(ctx, p.q.skippedAt, p.consumer, ev.AggregateType, ev.AggregateID, ev.AggregateVersion).Scan(
		&s.from, &s.to, &s.eventID, &s.request, &s.note, &s.at)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read skipped versions: %w", err)
	}
	return &s, nil
}

// failSkipped records ev, a version a resolve had skipped, in the failed table (reason "skipped") and
// warns, naming the consumer, the aggregate, the version and the request that skipped it. No inbox row
// is written: a redelivery is recorded again (one more attempt on the same record).
func (p *Processor) failSkipped(ctx context.Context, ev Event, s *skippedVersion) (Result, error) {
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, p.q.clearAttempts, p.consumer, ev.ID); err != nil {
			return fmt.Errorf("clear attempts: %w", err)
		}
		return p.recordFailed(ctx, tx, ev, reasonSkipped, s.Error(), nil, 1)
	})
	if err != nil {
		return Result{}, fmt.Errorf("event %s arrived after its version was skipped and could not be recorded: %w",
			ev.ID, err)
	}
	p.log.Warn("inbox: a version skipped by a resolve arrived; recorded as failed, not applied",
		"consumer", p.consumer, "event_id", ev.ID, "aggregate_type", ev.AggregateType, "aggregate_id",
		ev.AggregateID, "version", ev.AggregateVersion, "request_id", s.request, "skipped_by_event_id", s.eventID,
		"skipped_from", s.from, "skipped_to", s.to)
	return Result{Outcome: Failed}, nil
}

// checkPremise refuses (RefusedError) a request's resolve of parked event ev, its aggregate now at
// version applied, when the missing versions changed since the request was filed: the aggregate moved,
// or a version between it and ev arrived (parked or failed) after the filing. A direct call has no
// premise and is not checked.
func (p *Processor) checkPremise(ctx context.Context, tx pgx.Tx, ev Event, applied int64, how settle) error {
	if how.premise == nil {
		return nil
	}
	if applied != *how.premise {
		return &RefusedError{Reason: fmt.Sprintf("the missing version %d arrived (%s %s is at version %d, was %d "+
			"when the request was filed); nothing skipped", *how.premise+1, ev.AggregateType, ev.AggregateID,
			applied, *how.premise)}
	}
	var v, failedID int64
	var status string
	err := tx.QueryRow(ctx, p.q.arrivedInGap, p.consumer, ev.AggregateType, ev.AggregateID, applied,
		ev.AggregateVersion, how.filedAt).Scan(&v, &status, &failedID)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return fmt.Errorf("look for missing versions that arrived: %w", err)
	case failedID != 0:
		return &RefusedError{Reason: fmt.Sprintf("the missing version %d arrived and failed (failed record %d: "+
			"retry or resolve it); nothing skipped", v, failedID)}
	}
	return &RefusedError{Reason: fmt.Sprintf("the missing version %d arrived (%s); nothing skipped", v, status)}
}
