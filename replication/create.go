package replication

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// watchCreation logs, once slot creation has waited for a while, the sessions it is waiting for: building
// the slot's snapshot waits until every transaction running at that moment ends, so an idle-in-transaction
// session or a forgotten prepared transaction makes it wait indefinitely. The returned stop ends the watch.
func watchCreation(ctx context.Context, url string, log *slog.Logger, after time.Duration) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			return
		case <-time.After(after):
		}
		conn, err := ConnectSQL(ctx, url)
		if err != nil {
			return
		}
		defer conn.Close(context.Background())
		rows, err := conn.Query(ctx, `SELECT pid, coalesce(state, ''), coalesce(now() - xact_start, interval '0')::text
			FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
			UNION ALL SELECT 0, 'prepared ' || gid, (now() - prepared)::text FROM pg_prepared_xacts`)
		if err != nil {
			return
		}
		type waiter struct {
			pid        int32
			state, age string
		}
		list, _ := pgx.CollectRows(rows, func(r pgx.CollectableRow) (waiter, error) {
			var w waiter
			return w, r.Scan(&w.pid, &w.state, &w.age)
		})
		log.Warn("creating the replication slot waits for transactions that were running when it began to end; "+
			"end or commit them (pg_terminate_backend, COMMIT PREPARED / ROLLBACK PREPARED)", "waiting_for", len(list))
		for _, w := range list {
			log.Warn("slot creation waits for", "pid", w.pid, "state", w.state, "transaction_age", w.age)
		}
	}()
	return func() { cancel(); <-done }
}

// slotOptions is what follows the output plugin in CREATE_REPLICATION_SLOT: the snapshot action in the
// form every supported version accepts, or, with failover (PostgreSQL 17+), the option list that carries
// both, e.g. (SNAPSHOT 'export', FAILOVER true).
func slotOptions(export, failover bool) pglogrepl.CreateReplicationSlotOptions {
	switch {
	case failover && export:
		return pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "(SNAPSHOT 'export', FAILOVER true)"}
	case failover:
		return pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "(SNAPSHOT 'nothing', FAILOVER true)"}
	case export:
		return pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "EXPORT_SNAPSHOT"}
	}
	return pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT"}
}
