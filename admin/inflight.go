package admin

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// InFlight is a transaction of the connection's database that may still write into the database's slots:
// an open one that holds a transaction ID (pg_stat_activity.backend_xid), or a prepared one
// (pg_prepared_xacts). What it wrote is in the WAL, but not among a slot's committed changes until it
// commits, so a peek does not count it; and a slot created while it runs starts decoding after it ends
// (CREATE_REPLICATION_SLOT waits for the transactions running when it starts), so a reset that dropped
// the slot meanwhile would lose its events.
//
// Every role sees pid, backend_xid, application_name and usename of every session, and pg_prepared_xacts
// whole; only xact_start and state need pg_read_all_stats (or membership in the session's role), and
// are then nil and "".
type InFlight struct {
	Prepared    bool
	XID         string     // the transaction ID: backend_xid, or pg_prepared_xacts.transaction
	PID         int        // open: the server process
	Application string     // open: application_name
	User        string     // open: usename; prepared: owner
	State       string     // open: state ("idle in transaction", …); "" when not visible to the role
	Started     *time.Time // open: xact_start; nil when not visible to the role
	GID         string     // prepared: its global identifier
	PreparedAt  time.Time  // prepared: when it was prepared
}

// DefaultInFlightWait is how long reset waits for the transactions in flight to end (reset --wait).
const DefaultInFlightWait = 30 * time.Second

// InFlightTransactions lists the transactions of the connection's database, other than the connection's
// own, that may still write into a slot of it: open ones holding a transaction ID and prepared ones,
// oldest first. Other databases' transactions are left out: they cannot write this database's outbox
// rows or logical messages (a slot decodes only its database's changes), even though a slot's creation
// waits for them too.
//
// A transaction without an ID has written nothing yet. Should it write after this list is taken, its
// events came after reset began: they are in the slot when it commits before the peek, or else in the
// window between reset and the next run's slot that every write after a reset falls into (a transaction
// that gets its ID after the new slot's start is decoded by it in full; one that gets it before is not).
func InFlightTransactions(ctx context.Context, conn *pgx.Conn) ([]InFlight, error) {
	rows, err := conn.Query(ctx, `SELECT false, backend_xid::text, pid, coalesce(application_name, ''), coalesce(usename::text, ''),
			coalesce(state, ''), xact_start, '', NULL::timestamptz, coalesce(xact_start, backend_start) AS since
		FROM pg_stat_activity WHERE datname = current_database() AND backend_xid IS NOT NULL AND pid <> pg_backend_pid()
		UNION ALL
		SELECT true, transaction::text, 0, '', owner::text, '', NULL, gid, prepared, prepared
		FROM pg_prepared_xacts WHERE database = current_database()
		ORDER BY since, 2`)
	if err != nil {
		return nil, fmt.Errorf("read the transactions in flight (pg_stat_activity, pg_prepared_xacts): %w", err)
	}
	var out []InFlight
	for rows.Next() {
		var t InFlight
		var prepared *time.Time
		var since *time.Time
		if err := rows.Scan(&t.Prepared, &t.XID, &t.PID, &t.Application, &t.User, &t.State, &t.Started, &t.GID,
			&prepared, &since); err != nil {
			return nil, fmt.Errorf("read the transactions in flight: %w", err)
		}
		if prepared != nil {
			t.PreparedAt = *prepared
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the transactions in flight (pg_stat_activity, pg_prepared_xacts): %w", err)
	}
	return out, nil
}

// String names the transaction for an operator: what it is, who runs it and since when.
func (t InFlight) String() string {
	if t.Prepared {
		return fmt.Sprintf("prepared transaction gid %s (xid %s, prepared %s, owner %s)", quoteLiteral(t.GID), t.XID,
			t.PreparedAt.UTC().Format(time.RFC3339), t.User)
	}
	s := fmt.Sprintf("open transaction pid %d (xid %s", t.PID, t.XID)
	if t.Application != "" {
		s += ", application " + t.Application
	}
	s += ", user " + t.User
	if t.Started == nil {
		return s + "; its state and start are visible with pg_read_all_stats)"
	}
	if t.State != "" {
		s += ", " + t.State
	}
	return s + ", started " + t.Started.UTC().Format(time.RFC3339) + ")"
}

// quoteLiteral is s as an SQL string literal, as COMMIT PREPARED takes it.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// listInFlight names the transactions, at most limit of them, then how many more.
func listInFlight(ts []InFlight, limit int) string {
	var names []string
	for i, t := range ts {
		if i == limit {
			names = append(names, fmt.Sprintf("and %d more", len(ts)-limit))
			break
		}
		names = append(names, t.String())
	}
	return strings.Join(names, "; ")
}

// InFlightList names the transactions for an operator, at most ten of them, then how many more.
func InFlightList(ts []InFlight) string { return listInFlight(ts, 10) }

// stillInFlight is those of awaited that are in now (by transaction ID: an ID is not reused while its
// transaction runs, and a transaction keeps it when it is prepared).
func stillInFlight(awaited, now []InFlight) []InFlight {
	running := map[string]bool{}
	for _, t := range now {
		running[t.XID] = true
	}
	var left []InFlight
	for _, t := range awaited {
		if running[t.XID] {
			left = append(left, t)
		}
	}
	return left
}

// awaitInFlight waits up to wait for the transactions in flight now (InFlightTransactions) to end, and
// returns those that have not; it calls onWait once with them before it waits. Transactions that begin
// meanwhile are not waited for (they wrote after reset began). It returns ctx's error when ctx ends first.
func awaitInFlight(ctx context.Context, conn *pgx.Conn, wait time.Duration, onWait func([]InFlight)) ([]InFlight, error) {
	left, err := InFlightTransactions(ctx, conn)
	if err != nil || len(left) == 0 || wait <= 0 {
		return left, err
	}
	if onWait != nil {
		onWait(left)
	}
	deadline := time.Now().Add(wait)
	for len(left) > 0 && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return left, ctx.Err()
		case <-time.After(min(200*time.Millisecond, time.Until(deadline))):
		}
		now, err := InFlightTransactions(ctx, conn)
		if err != nil {
			return left, err
		}
		left = stillInFlight(left, now)
	}
	return left, nil
}

// inFlightRefusal is Reset's refusal of a slot into which the transactions left may still write.
func inFlightRefusal(slot, db string, waited time.Duration, left []InFlight) error {
	return cdc.Fatalf("slot %s may still receive events from %d transactions of database %s that are open or prepared: %s; "+
		"reset waited %v (--wait) for them to end. Their events are not among the slot's committed changes yet, so reset "+
		"cannot count them, and a new slot starts after them, so after a reset they would never be published. Commit or "+
		"roll them back (COMMIT PREPARED 'gid' or ROLLBACK PREPARED 'gid' for a prepared one; SELECT "+
		"pg_terminate_backend(pid) ends an open one's session and rolls it back), then reset again, which then counts "+
		"what they committed; or give a longer --wait, or pass --ignore-in-flight to drop their events; nothing was changed",
		slot, len(left), db, listInFlight(left, 10), waited)
}
