package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Prune deletes this consumer's inbox rows received before cutoff that the aggregate's version
// watermark still blocks: applied, stale or skipped rows at or below their aggregate's applied version.
// The applied version never goes back (events, full states and Repair only move it forward), so a
// redelivery of a pruned event is recorded again as Stale and has no effect. What pruning loses is the
// fingerprint: the same id with other content is then Stale rather than Conflict. Parked rows are never
// pruned. It also deletes the attempt counts last updated before cutoff (of events that stopped coming)
// the repair requests (cdc-router inbox retry|resolve) answered, cancelled or expired before cutoff,
// the versions skipped by ResolveParked before cutoff (one arriving later is then Stale, not failed),
// and the failed events retried or resolved before cutoff (their inbox rows, applied or skipped, keep
// blocking redeliveries); a waiting request and an open failure stay.
// Choose cutoff beyond every window in which an old event can come back (see docs/consumers.md). It
// runs with Config.LockTimeout but not Config.StatementTimeout.
func (p *Processor) Prune(ctx context.Context, cutoff time.Time) (int64, error) {
	var n int64
	// A large prune may take longer than the statement timeout meant for one event.
	err := p.inTxWith(ctx, timeoutsSQL(p.cfg.LockTimeout, -1), func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, p.q.prune, p.consumer, cutoff)
		if err != nil {
			return err
		}
		n = tag.RowsAffected()
		if _, err := tx.Exec(ctx, p.q.pruneAttempts, p.consumer, cutoff); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.q.pruneRequests, p.consumer, cutoff); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, p.q.pruneSkipped, p.consumer, cutoff); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, p.q.pruneFailed, p.consumer, cutoff)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("prune inbox: %w", err)
	}
	p.log.Info("inbox pruned", "rows", n, "cutoff", cutoff)
	return n, nil
}
