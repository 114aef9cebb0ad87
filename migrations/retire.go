package migrations

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Retired is what RetireEmitKeys did: the keys it retired, the key that signs, and the keys it deleted
// (retired longer than EmitKeyGrace ago).
type Retired struct {
	Keys    []int32
	Signing int32
	Deleted []int32
}

// retirePoll is how often RetireEmitKeys looks again while it waits.
const retirePoll = 500 * time.Millisecond

// RetireEmitKeys retires every emit key older than the newest (`migrate --emit-function --retire-emit-keys`):
// emit stops signing with them, the routers verify with them for EmitKeyGrace more. It refuses, as a
// *Problem naming them and the fix, while the newest key's not_before has not passed (a router may not
// hold it yet), while a prepared transaction of this database exists, or while an open transaction of this
// database that holds a transaction id began before that not_before: such a transaction may carry an event
// signed with an older key. With wait, it looks again until none is left, for at most wait (or until ctx
// ends), and tells waiting the first refusal it waits on.
func RetireEmitKeys(ctx context.Context, conn *pgx.Conn, schema string, wait time.Duration, waiting func(msg string)) (Retired, error) {
	deadline := time.Now().Add(wait)
	told := false
	for {
		blocked, err := retireBlocked(ctx, conn, schema, wait)
		if err != nil || blocked == "" {
			if err != nil {
				return Retired{}, err
			}
			return retire(ctx, conn, schema)
		}
		left := time.Until(deadline)
		if left <= 0 {
			return Retired{}, &Problem{Msg: blocked}
		}
		if !told && waiting != nil {
			waiting(fmt.Sprintf("waiting up to %v: %s", left.Round(time.Second), blocked))
			told = true
		}
		select {
		case <-ctx.Done():
			return Retired{}, fmt.Errorf("retire emit keys: %w (%s)", ctx.Err(), blocked)
		case <-time.After(min(retirePoll, left)):
		}
	}
}

// retireBlocked is why the keys cannot be retired yet, "" when they can.
func retireBlocked(ctx context.Context, conn *pgx.Conn, schema string, wait time.Duration) (string, error) {
	table := pgx.Identifier{schema, "emit_keys"}.Sanitize()
	var newest int32
	var notBefore time.Time
	var future bool
	err := conn.QueryRow(ctx, `SELECT key_id, not_before, not_before > now() FROM `+table+
		` WHERE retired_at IS NULL ORDER BY key_id DESC LIMIT 1`).Scan(&newest, &notBefore, &future)
	if err == pgx.ErrNoRows {
		return "", problemf("%s holds no key: run `cdc-router migrate --emit-function`", table)
	}
	if err != nil {
		return "", fmt.Errorf("read %s: %w", table, err)
	}
	again := "run again then, or with --wait " + (EmitKeyDelay + 10*time.Second).String() + " to wait for it"
	if wait > 0 {
		again = "give --wait more time"
	}
	if future {
		return fmt.Sprintf("cannot retire the emit keys older than key %d yet: key %d signs only from %s, and a running "+
			"router may not hold it before; %s", newest, newest, stamp(notBefore), again), nil
	}
	blockers, err := retireBlockers(ctx, conn, notBefore)
	if err != nil || len(blockers) == 0 {
		return "", err
	}
	again = "or run again with --wait 10m to wait for them"
	if wait > 0 {
		again = "or give --wait more time"
	}
	return fmt.Sprintf("cannot retire the emit keys older than key %d yet: %d transaction(s) of this database began "+
		"before key %d signs (%s) and may carry events signed with an older key: %s; commit or roll them back "+
		"(COMMIT PREPARED or ROLLBACK PREPARED '<gid>' for a prepared one), %s", newest, len(blockers), newest,
		stamp(notBefore), strings.Join(blockers, "; "), again), nil
}

// retireBlockers names the prepared transactions of this database and its open transactions that hold a
// transaction id and began before notBefore (or at a time this role may not see: pg_read_all_stats shows it).
func retireBlockers(ctx context.Context, conn *pgx.Conn, notBefore time.Time) ([]string, error) {
	rows, _ := conn.Query(ctx, `SELECT 'prepared transaction ' || quote_literal(gid) || ' (prepared ' ||
			to_char(prepared AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"') || ', owner ' || quote_ident(owner) || ')'
		FROM pg_prepared_xacts WHERE database = current_database()
		UNION ALL
		SELECT 'pid ' || pid || ' (transaction began ' || coalesce(to_char(xact_start AT TIME ZONE 'UTC',
			'YYYY-MM-DD"T"HH24:MI:SS"Z"'), 'at a time this role may not see') || ', application_name ' ||
			quote_literal(coalesce(application_name, '')) || ', user ' || coalesce(quote_ident(usename), '?') || ')'
		FROM pg_stat_activity WHERE datname = current_database() AND backend_xid IS NOT NULL
		  AND pid <> pg_backend_pid() AND (xact_start IS NULL OR xact_start < $1)`, notBefore)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the open and prepared transactions: %w", err)
	}
	return names, nil
}

// retire sets retired_at on the keys older than the newest and deletes those retired longer than
// EmitKeyGrace ago, in one transaction.
func retire(ctx context.Context, conn *pgx.Conn, schema string) (Retired, error) {
	table := pgx.Identifier{schema, "emit_keys"}.Sanitize()
	var r Retired
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT max(key_id) FROM `+table+` WHERE retired_at IS NULL`).Scan(&r.Signing); err != nil {
			return err
		}
		rows, _ := tx.Query(ctx, `UPDATE `+table+` SET retired_at = now() WHERE retired_at IS NULL AND key_id < $1
			RETURNING key_id`, r.Signing)
		var err error
		if r.Keys, err = pgx.CollectRows(rows, pgx.RowTo[int32]); err != nil {
			return err
		}
		rows, _ = tx.Query(ctx, `DELETE FROM `+table+` WHERE retired_at < now() - make_interval(secs => $1)
			RETURNING key_id`, EmitKeyGrace.Seconds())
		r.Deleted, err = pgx.CollectRows(rows, pgx.RowTo[int32])
		return err
	})
	if err != nil {
		return Retired{}, fmt.Errorf("retire emit keys in %s: %w", table, err)
	}
	return r, nil
}

// stamp is t in UTC to the second, as the refusals print it.
func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// KeyList is ids as "1, 2" ("none" when empty), for the lines migrate prints.
func KeyList(ids []int32) string {
	if len(ids) == 0 {
		return "none"
	}
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = strconv.Itoa(int(id))
	}
	return strings.Join(s, ", ")
}
