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
)

// recordFailed inserts (or counts again) an event that can never apply. stored is the fingerprint
// already in the inbox for a conflict, nil otherwise. The detail is an error text, never the payload.
func (p *Processor) recordFailed(ctx context.Context, tx pgx.Tx, ev Event, reason, detail string, stored []byte) error {
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
	_, err := tx.Exec(ctx, p.q.fail, ev.ID, reason, detail, ev.AggregateType, ev.AggregateID, version,
		ev.Type, schemaVersion, stored, ev.Fingerprint(), payload, headers)
	if err != nil {
		return fmt.Errorf("record failed event: %w", err)
	}
	return nil
}

// fail records ev as failed for cause in a transaction of its own and returns the Failed outcome. No
// inbox row is written, so a replay of the event after a fix is processed normally.
func (p *Processor) fail(ctx context.Context, ev Event, reason string, cause error) (Result, error) {
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		return p.recordFailed(ctx, tx, ev, reason, cause.Error(), nil)
	})
	if err != nil {
		return Result{}, fmt.Errorf("event %s failed (%v) and could not be recorded: %w", ev.ID, cause, err)
	}
	p.log.Error("inbox event failed permanently", "event_id", ev.ID, "aggregate_type", ev.AggregateType,
		"aggregate_id", ev.AggregateID, "reason", reason, "error", cause)
	return Result{Outcome: Failed}, nil
}
