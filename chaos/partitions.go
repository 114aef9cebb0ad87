package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// partitions are the partitions of public.outbox the harness attaches, detaches and drops
// (gen.Setup.Partitioned), beside the monthly ones and the default partition of migrate --partitioned.
// Partition g covers one day from 2031-01-01 plus g days, far from now(), so that only the rows a writer
// puts there on purpose land in it; a range is used once (a row written while its partition was
// detached lands in the default partition, which then keeps the range from being attached again).
type partitions struct {
	mu    sync.Mutex
	parts []partition
}

type partition struct {
	attached, detached, dropped bool
}

var partitionEpoch = time.Date(2031, 1, 1, 0, 0, 0, 0, time.UTC)

// live is the newest attached partition, or -1.
func (p *partitions) live() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	for g := len(p.parts) - 1; g >= 0; g-- {
		if p.parts[g].attached {
			return g
		}
	}
	return -1
}

// dropped reports whether partition g was dropped, with the rows in it.
func (p *partitions) dropped(g int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return g >= 0 && g < len(p.parts) && p.parts[g].dropped
}

// detachedTables are the partitions detached and not dropped: their rows committed, and are still in them.
func (p *partitions) detachedTables() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ts []string
	for g, pt := range p.parts {
		if pt.detached && !pt.dropped {
			ts = append(ts, check.PartitionName(g))
		}
	}
	return ts
}

// ddl runs stmts in one transaction with lock_timeout 5 s (as docs/partitioning.md tells a retention job),
// trying up to five times while the lock is not granted (an initial snapshot or a backfill page holds it).
func (w *world) ddl(stmts ...string) error {
	ctx := context.Background()
	var err error
	for range 5 {
		var c *pgx.Conn
		if c, err = pgx.Connect(ctx, w.directURL()); err != nil {
			time.Sleep(time.Second)
			continue
		}
		err = pgx.BeginFunc(ctx, c, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
				return err
			}
			for _, s := range stmts {
				if _, err := tx.Exec(ctx, s); err != nil {
					return err
				}
			}
			return nil
		})
		c.Close(ctx)
		if err == nil || !strings.Contains(err.Error(), "lock timeout") {
			return err
		}
	}
	return err
}

// attachPartition creates the next partition as a table and attaches it (SHARE UPDATE EXCLUSIVE: inserts
// go on), the way docs/partitioning.md adds one by hand.
func (w *world) attachPartition() string {
	w.parts.mu.Lock()
	g := len(w.parts.parts)
	w.parts.parts = append(w.parts.parts, partition{})
	w.parts.mu.Unlock()
	from := partitionEpoch.AddDate(0, 0, g)
	err := w.ddl(`CREATE TABLE `+check.PartitionName(g)+` (LIKE public.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
		fmt.Sprintf(`ALTER TABLE public.outbox ATTACH PARTITION %s FOR VALUES FROM ('%s') TO ('%s')`, check.PartitionName(g),
			from.Format(time.RFC3339), from.AddDate(0, 0, 1).Format(time.RFC3339)))
	if err != nil {
		return fmt.Sprintf("%s: %v", check.PartitionName(g), err)
	}
	w.parts.mu.Lock()
	w.parts.parts[g].attached = true
	w.parts.mu.Unlock()
	return check.PartitionName(g)
}

// changePartition detaches or drops the oldest partition of the harness's that still can be.
func (w *world) changePartition(k gen.Kind) string {
	w.parts.mu.Lock()
	g := -1
	for i, pt := range w.parts.parts {
		if k == gen.FaultPartDetach && pt.attached || k == gen.FaultPartDrop && (pt.attached || pt.detached) {
			g = i
			break
		}
	}
	w.parts.mu.Unlock()
	if g < 0 {
		return "skipped: no partition to " + strings.TrimPrefix(string(k), "partition-")
	}
	stmt := `ALTER TABLE public.outbox DETACH PARTITION ` + check.PartitionName(g)
	if k == gen.FaultPartDrop {
		stmt = `DROP TABLE ` + check.PartitionName(g)
	}
	if err := w.ddl(stmt); err != nil {
		return fmt.Sprintf("%s: %v", check.PartitionName(g), err)
	}
	w.parts.mu.Lock()
	pt := &w.parts.parts[g]
	if k == gen.FaultPartDrop {
		pt.dropped = true
	} else {
		pt.detached = true
	}
	pt.attached = false
	w.parts.mu.Unlock()
	return check.PartitionName(g)
}

// occurredAt is where a writer's row goes: for about one row in four, into the live partition of the
// harness's (its partition number and a time in its range), else nowhere in particular (-1: now()).
func (wr *writer) occurredAt() (int, *time.Time) {
	if !wr.w.plan.Setup.Partitioned || wr.prng.IntN(4) != 0 {
		return -1, nil
	}
	g := wr.w.parts.live()
	if g < 0 {
		return -1, nil
	}
	t := partitionEpoch.AddDate(0, 0, g).Add(time.Duration(wr.prng.Int64N(int64(23 * time.Hour))))
	return g, &t
}
