package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Snapshot describes a trusted full snapshot of one aggregate, read from the source at version Source,
// that a reconciliation wants to write over the projection.
type Snapshot struct {
	AggregateType string
	AggregateID   string
	// Observed is the applied version the repairer read (State) before it compared the projection with
	// the source. The repair applies only if the projection is still at it.
	Observed int64
	// Source is the source version the snapshot contains every change up to.
	Source int64
}

// RepairFunc writes the full snapshot state into the projection inside tx.
type RepairFunc func(ctx context.Context, tx pgx.Tx) error

// RepairResult says whether a repair was applied and where the aggregate stands.
type RepairResult struct {
	// Repaired is false when the projection had moved away from Observed or was already at or above
	// Source; nothing was written then. Re-read State and compare again instead of retrying blindly.
	Repaired bool
	// Version is the aggregate's applied version after the call.
	Version int64
	// Unparked counts the parked events above Source applied after the snapshot.
	Unparked int
}

// ErrBadSnapshot reports a Snapshot that cannot describe a repair.
var ErrBadSnapshot = errors.New("bad snapshot")

// Repair applies a trusted full snapshot in one transaction, only if the aggregate is still at
// s.Observed and below s.Source: it sets the applied and the baseline version to s.Source and calls
// apply. From then on an event at or below the baseline is recorded and acknowledged without effect
// (Stale), even if it was never seen, while later events keep applying; parked events at or below
// s.Source become stale and those that follow it without a gap are applied. The check and the write
// hold the aggregate's row lock, so a repair never overwrites an event applied concurrently.
func (p *Processor) Repair(ctx context.Context, s Snapshot, apply RepairFunc) (RepairResult, error) {
	if s.AggregateType == "" || s.AggregateID == "" || s.Source < 1 || s.Observed < 0 {
		return RepairResult{}, fmt.Errorf("%w: need an aggregate, Source >= 1 and Observed >= 0, got %+v", ErrBadSnapshot, s)
	}
	var res RepairResult
	err := p.inTx(ctx, func(tx pgx.Tx) (err error) {
		res, err = p.repair(ctx, tx, s, apply)
		return err
	})
	if err != nil {
		return RepairResult{}, fmt.Errorf("repair %s %s to version %d: %w", s.AggregateType, s.AggregateID, s.Source, err)
	}
	p.log.Info("inbox snapshot repair", "aggregate_type", s.AggregateType, "aggregate_id", s.AggregateID,
		"observed", s.Observed, "source", s.Source, "repaired", res.Repaired, "version", res.Version)
	return res, nil
}

func (p *Processor) repair(ctx context.Context, tx pgx.Tx, s Snapshot, apply RepairFunc) (RepairResult, error) {
	if _, err := tx.Exec(ctx, p.q.ensureAggregate, p.consumer, s.AggregateType, s.AggregateID); err != nil {
		return RepairResult{}, fmt.Errorf("create aggregate state: %w", err)
	}
	// In read committed, the UPDATE waits for a concurrent event's transaction and then checks the
	// condition against the row it committed.
	tag, err := tx.Exec(ctx, p.q.repair, p.consumer, s.AggregateType, s.AggregateID, s.Observed, s.Source)
	if err != nil {
		return RepairResult{}, fmt.Errorf("conditional update: %w", err)
	}
	if tag.RowsAffected() == 0 {
		var st AggregateState
		if err := tx.QueryRow(ctx, p.q.state, p.consumer, s.AggregateType, s.AggregateID).Scan(&st.Applied, &st.Baseline); err != nil {
			return RepairResult{}, fmt.Errorf("read aggregate state: %w", err)
		}
		return RepairResult{Version: st.Applied}, nil
	}
	if err := apply(ctx, tx); err != nil {
		return RepairResult{}, fmt.Errorf("apply snapshot: %w", err)
	}
	applied, n, err := p.unpark(ctx, tx, s.AggregateType, s.AggregateID, s.Source)
	if err != nil {
		return RepairResult{}, err
	}
	if _, err := tx.Exec(ctx, p.q.setApplied, p.consumer, s.AggregateType, s.AggregateID, applied); err != nil {
		return RepairResult{}, fmt.Errorf("set applied version: %w", err)
	}
	return RepairResult{Repaired: true, Version: applied, Unparked: n}, nil
}
