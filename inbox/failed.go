package inbox

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Reasons recorded in the failed table.
const (
	reasonConflict  = "conflict"
	reasonPermanent = "permanent"
	reasonMalformed = "malformed"
	reasonExhausted = "exhausted"
	reasonSkipped   = "skipped" // a version ResolveParked gave up arrived after all
)

// recordFailed inserts (or counts again, reopening it if it was resolved) an event that did not apply.
// stored is the fingerprint already in the inbox for a conflict, nil otherwise; attempts is how many
// failures this record stands for. The detail is an error text, never the payload.
func (p *Processor) recordFailed(ctx context.Context, tx pgx.Tx, ev Event, reason, detail string, stored []byte, attempts int) error {
	headers := ev.Headers
	if headers == nil {
		headers = map[string]string{}
	}
	payload := ev.Payload
	if payload == nil {
		payload = []byte{}
	}
	var version, schemaVersion any
	if ev.AggregateVersion != 0 {
		version = ev.AggregateVersion
	}
	if ev.SchemaVersion != 0 {
		schemaVersion = ev.SchemaVersion
	}
	_, err := tx.Exec(ctx, p.q.fail, p.consumer, ev.ID, reason, detail, ev.AggregateType, ev.AggregateID, version,
		ev.Type, schemaVersion, lsnText(ev.CommitLSN), ev.Backfill, ev.FullState, stored, ev.Fingerprint(),
		payload, headers, max(1, attempts))
	if err != nil {
		return fmt.Errorf("record failed event: %w", err)
	}
	return nil
}

// fail records ev as failed for cause in a transaction of its own, ends its count of attempts, and
// returns the Failed outcome. No inbox row is written, so a replay of the event after a fix is
// processed normally.
func (p *Processor) fail(ctx context.Context, ev Event, reason string, cause error) (Result, error) {
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		if ev.ID != "" {
			if _, err := tx.Exec(ctx, p.q.clearAttempts, p.consumer, ev.ID); err != nil {
				return fmt.Errorf("clear attempts: %w", err)
			}
		}
		return p.recordFailed(ctx, tx, ev, reason, cause.Error(), nil, 1)
	})
	if err != nil {
		return Result{}, fmt.Errorf("event %s failed (%v) and could not be recorded: %w", ev.ID, cause, err)
	}
	p.log.Error("inbox event failed permanently", "consumer", p.consumer, "event_id", ev.ID,
		"aggregate_type", ev.AggregateType, "aggregate_id", ev.AggregateID, "reason", reason, "error", cause)
	return Result{Outcome: Failed}, nil
}

// RecordMalformed records a delivery that could not be read as an event (cause wraps ErrMalformed) in
// the failed table with reason 'malformed', keeping whatever ev holds, and returns the Failed outcome:
// the delivery is acknowledged, as redelivery cannot fix it. A Process of an invalid Event does the same.
func (p *Processor) RecordMalformed(ctx context.Context, ev Event, cause error) (Result, error) {
	return p.fail(ctx, ev, reasonMalformed, cause)
}
