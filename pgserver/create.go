package pgserver

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// creationReports are the waits after which a slot creation that still waits is reported, the last one
// repeated every creationReportEvery after it: a creation held up for a day is reported all day.
var creationReports = []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, time.Minute}

const creationReportEvery = time.Minute

// creationReportAt is when the i-th report (from 0) of a waiting slot creation is due, from its start.
func creationReportAt(i int) time.Duration {
	if n := len(creationReports); i >= n {
		return creationReports[n-1] + creationReportEvery*time.Duration(i-n+1)
	}
	return creationReports[i]
}

// CreationWait begins what the router waits for (WatchCreation's waitFor) while PostgreSQL creates a slot.
const CreationWait = "PostgreSQL to create replication slot "

// WatchCreation reports, for as long as the creation of slot waits, the transactions it waits for: building
// the slot's snapshot waits until every transaction running at that moment ends, so an idle-in-transaction
// session or a forgotten prepared transaction makes it wait indefinitely. It logs a WARN line and one line per
// transaction (pid, xid, state, age) after each of creationReports and then every creationReportEvery, and
// hands waitFor what the router waits for (/readyz's problem: the wait and its transactions), read over its
// own connection to url (each attempt and query bounded by d). The returned stop ends the watch.
func WatchCreation(ctx context.Context, url, slot string, d time.Duration, log *slog.Logger, waitFor func(string)) (stop func()) {
	what := CreationWait + slot + " (it waits until the transactions running when it began end)"
	waitFor(what)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		began := time.Now()
		for i := 0; ; i++ {
			if !sleep(ctx, time.Until(began.Add(creationReportAt(i)))) {
				return
			}
			if conn == nil || conn.IsClosed() {
				conn, _ = ConnectSQLWithin(ctx, url, d)
			}
			list, err := creationBlockers(ctx, conn, d)
			if ctx.Err() != nil {
				return
			}
			waited := time.Since(began).Round(time.Second)
			if err != nil {
				log.Warn("creating the replication slot still waits; the transactions it waits for could not be listed",
					"waited", waited, "error", err)
				continue
			}
			log.Warn("creating the replication slot waits for transactions that were running when it began to end; "+
				"end or commit them (pg_terminate_backend, COMMIT PREPARED / ROLLBACK PREPARED)", "waiting_for", len(list),
				"waited", waited)
			names := make([]string, 0, len(list))
			for _, w := range list {
				log.Warn("slot creation waits for", "pid", w.pid, "xid", w.xid, "state", w.state, "transaction_age", w.age)
				names = append(names, fmt.Sprintf("pid %d (xid %s, %s, for %s)", w.pid, w.xid, w.state, w.age))
			}
			waitFor(what + ": " + fmt.Sprint(len(list)) + " transaction(s) still run: " + strings.Join(names, ", ") +
				"; end or commit them (pg_terminate_backend, COMMIT PREPARED / ROLLBACK PREPARED)")
		}
	}()
	return func() { cancel(); <-done }
}

// sleep waits d and reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// blocker is a transaction a slot creation may wait for: a session with an xid (pid, backend_xid, state)
// or a prepared transaction (pid 0, state "prepared <gid>").
type blocker struct {
	pid             int32
	xid, state, age string
}

// creationBlockers lists the transactions with an xid (the ones a new slot's snapshot waits for), within d.
func creationBlockers(ctx context.Context, conn *pgx.Conn, d time.Duration) ([]blocker, error) {
	if conn == nil {
		return nil, errors.New("no connection to PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	rows, err := conn.Query(ctx, `SELECT pid, backend_xid::text, coalesce(state, ''),
			date_trunc('second', coalesce(now() - xact_start, interval '0'))::text
		FROM pg_stat_activity WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()
		UNION ALL SELECT 0, transaction::text, 'prepared ' || gid, date_trunc('second', now() - prepared)::text
		FROM pg_prepared_xacts`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (blocker, error) {
		var b blocker
		return b, r.Scan(&b.pid, &b.xid, &b.state, &b.age)
	})
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
