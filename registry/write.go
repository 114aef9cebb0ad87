package registry

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// beatOrInsert refreshes the record's role, heartbeat, last error and publishing (and stopped_at when
// stopping), or, when its row is not there, writes it whole. heartbeat_at and stopped_at are the
// database's clock. A table without the publishing columns (migrated before 019) is written without them,
// once that is known, and logged once at WARN naming migrate: the record is never lost over them.
func (k *keeper) beatOrInsert(ctx context.Context, stopping bool) error {
	err := k.writeRecord(ctx, stopping)
	var pgErr *pgconn.PgError
	if err != nil && !k.old019 && errors.As(err, &pgErr) && pgErr.Code == "42703" { // undefined_column
		k.old019 = true
		k.log.Warn("the routers table has no columns window_limit and inflight_events (a schema migrated before this version): "+
			"the record is kept without them, so `cdc-router status` does not show the in-flight limit; run `cdc-router migrate` to add them (routers started after it record them; this one keeps writing without them)",
			"table", k.table())
		err = k.writeRecord(ctx, stopping)
	}
	return err
}

// writeRecord is beatOrInsert's one attempt, with the publishing columns unless the table lacks them.
func (k *keeper) writeRecord(ctx context.Context, stopping bool) error {
	r := k.rec
	var limit, inflight *int
	if p := r.Publishing; p != nil {
		limit, inflight = &p.WindowLimit, &p.InFlight
	}
	set, args := ``, []any{r.Slot, r.Instance, r.Role, stopping, r.LastError}
	publishingCols, publishingValues, publishingSet := `, window_limit, inflight_events`, `, $17, $18`,
		`, window_limit = excluded.window_limit, inflight_events = excluded.inflight_events`
	if k.old019 {
		publishingCols, publishingValues, publishingSet = ``, ``, ``
	} else {
		set, args = `, window_limit = $6, inflight_events = $7`, append(args, limit, inflight)
	}
	tag, err := k.conn.Exec(ctx, `UPDATE `+k.table()+` SET role = $3, heartbeat_at = now(),
		stopped_at = CASE WHEN $4 THEN now() END, last_error = nullif($5, '')`+set+` WHERE slot = $1 AND instance = $2`, args...)
	if err != nil || tag.RowsAffected() == 1 {
		return err
	}
	mappings, settings := r.Mappings, r.Settings
	if mappings == nil {
		mappings = map[string]string{}
	}
	if settings == nil {
		settings = map[string]string{}
	}
	args = []any{r.Slot, r.Instance, r.Role, r.Publication, r.Tables, mappings, r.MessagePrefix, r.Shard, r.Exchange, settings,
		r.Version, r.Host, r.PID, r.StartedAt, stopping, r.LastError}
	if !k.old019 {
		args = append(args, limit, inflight)
	}
	_, err = k.conn.Exec(ctx, `INSERT INTO `+k.table()+` AS r (slot, instance, role, publication, tables, mappings,
			message_prefix, shard, exchange, settings, version, host, pid, started_at, heartbeat_at, stopped_at, last_error`+publishingCols+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, nullif($11, ''), nullif($12, ''), $13, $14, now(),
			CASE WHEN $15 THEN now() END, nullif($16, '')`+publishingValues+`)
		ON CONFLICT (slot, instance) DO UPDATE SET role = excluded.role, publication = excluded.publication,
			tables = excluded.tables, mappings = excluded.mappings, message_prefix = excluded.message_prefix,
			shard = excluded.shard, exchange = excluded.exchange, settings = excluded.settings, version = excluded.version,
			host = excluded.host, pid = excluded.pid, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
			stopped_at = excluded.stopped_at, last_error = excluded.last_error`+publishingSet, args...)
	return err
}

// prune deletes the slot's records of other processes that stopped or were not heard from for superseded:
// never a live process's.
func (k *keeper) prune(ctx context.Context) error {
	tag, err := k.conn.Exec(ctx, `DELETE FROM `+k.table()+` WHERE slot = $1 AND instance <> $2
		AND (stopped_at IS NOT NULL OR coalesce(heartbeat_at, started_at, '-infinity') < now() - make_interval(secs => $3))`,
		k.rec.Slot, k.rec.Instance, superseded.Seconds())
	if err != nil {
		return err
	}
	k.pruned = true
	if n := tag.RowsAffected(); n > 0 {
		k.log.Debug("deleted the slot's records of stopped or long silent processes", "count", n)
	}
	return nil
}

// isRefusal reports whether err is PostgreSQL's refusal of a statement (an ERROR, not a FATAL that ends
// the session), after which the connection is still good.
func isRefusal(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity == "ERROR"
}

// errKey is what makes two failures the same for the log: PostgreSQL's code and message, or the error's text.
func errKey(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code + " " + pgErr.Message
	}
	return err.Error()
}

// failure is the WARN line of a failed write, naming the fix when there is one.
func (k *keeper) failure(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42501":
			role := "the router's role"
			if k.conn != nil {
				role = pgx.Identifier{k.conn.Config().User}.Sanitize()
			}
			grant := "GRANT SELECT, INSERT, UPDATE, DELETE ON " + k.table() + " TO " + role
			if strings.Contains(pgErr.Message, "for schema") {
				grant = "GRANT USAGE ON SCHEMA " + pgx.Identifier{k.schema}.Sanitize() + " TO " + role + "; " + grant
			}
			return fmt.Sprintf("the router may not write its record, so status cannot show what it runs with: run %s "+
				"as the owner; the router goes on and tries again every %v", grant, k.beat)
		case "42P01", "3F000":
			return fmt.Sprintf("the router's table %s does not exist (the schema predates migration 015), so status cannot "+
				"show what it runs with: run `cdc-router migrate`; the router goes on and tries again every %v", k.table(), k.beat)
		}
	}
	return fmt.Sprintf("could not write the router's record; the router goes on and tries again every %v", k.beat)
}
