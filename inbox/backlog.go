package inbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Backlog is what waits in the consumer's records: the parked events, the age of the oldest, and the
// failed events not yet retried or resolved.
type Backlog struct {
	Parked       int64
	OldestParked time.Duration // 0 when none is parked
	Failed       int64
}

// Backlog reads the consumer's Backlog in one read-only transaction (the Runner's gauges, read at
// scrape time).
func (p *Processor) Backlog(ctx context.Context) (Backlog, error) {
	var b Backlog
	var oldest float64
	err := func() error {
		tx, err := p.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
		return tx.QueryRow(ctx, p.q.backlog, p.consumer).Scan(&b.Parked, &oldest, &b.Failed)
	}()
	if err != nil {
		return Backlog{}, fmt.Errorf("read the inbox backlog of %q: %w", p.consumer, err)
	}
	b.OldestParked = time.Duration(oldest * float64(time.Second))
	return b, nil
}
