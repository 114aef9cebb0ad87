package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// columns are the routers table's columns in the order scan reads them.
const columns = `slot, instance, role, publication, tables, mappings, message_prefix, shard, exchange, settings,
	coalesce(version, ''), coalesce(host, ''), coalesce(pid, 0), started_at, heartbeat_at, stopped_at,
	coalesce(last_error, ''), (to_jsonb(r) ->> 'window_limit')::int, (to_jsonb(r) ->> 'inflight_events')::int`

// The publishing columns (migration 019) are read through to_jsonb(r), so that a table migrated before
// them reads as a record without publishing instead of failing `status`.

// List returns every record of the schema, newest first (by start, then by heartbeat).
func List(ctx context.Context, conn *pgx.Conn, schema string) ([]Record, error) {
	recs, _, err := read(ctx, conn, schema, "", nil)
	return recs, err
}

// Of returns the record that speaks for a slot: a live one (not stopped, heartbeat within Stale) preferring
// the active/streaming role, else the most recently started; ok is false when the slot has none. Liveness
// is judged by the database's clock, the one the heartbeats were written with.
func Of(ctx context.Context, conn *pgx.Conn, schema, slot string) (rec Record, ok bool, err error) {
	recs, now, err := read(ctx, conn, schema, "WHERE slot = $1", []any{slot})
	if err != nil {
		return Record{}, false, err
	}
	rec, ok = Speaker(recs, slot, now)
	return rec, ok, nil
}

// Now is the database's clock, which the records' heartbeats are written with: judge Live by it.
func Now(ctx context.Context, conn *pgx.Conn) (time.Time, error) {
	var now time.Time
	if err := conn.QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
		return time.Time{}, fmt.Errorf("read the database's clock: %w", err)
	}
	return now, nil
}

// read returns the records matching where, newest first, and the database's clock.
func read(ctx context.Context, conn *pgx.Conn, schema, where string, args []any) ([]Record, time.Time, error) {
	table := pgx.Identifier{schema, "routers"}.Sanitize()
	rows, err := conn.Query(ctx, `SELECT `+columns+`, now() FROM `+table+` AS r `+where+
		` ORDER BY started_at DESC NULLS LAST, heartbeat_at DESC NULLS LAST, slot, instance`, args...)
	if err != nil {
		return nil, time.Time{}, readErr(schema, err)
	}
	defer rows.Close()
	var recs []Record
	var now time.Time
	for rows.Next() {
		var r Record
		var started, heartbeat *time.Time
		var limit, inflight *int
		err := rows.Scan(&r.Slot, &r.Instance, &r.Role, &r.Publication, &r.Tables, &r.Mappings, &r.MessagePrefix,
			&r.Shard, &r.Exchange, &r.Settings, &r.Version, &r.Host, &r.PID, &started, &heartbeat, &r.StoppedAt,
			&r.LastError, &limit, &inflight, &now)
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("read %s: %w", table, err)
		}
		if started != nil {
			r.StartedAt = *started
		}
		if heartbeat != nil {
			r.HeartbeatAt = *heartbeat
		}
		if limit != nil {
			r.Publishing = &Publishing{WindowLimit: *limit}
			if inflight != nil {
				r.Publishing.InFlight = *inflight
			}
		}
		recs = append(recs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, readErr(schema, err)
	}
	if now.IsZero() {
		if now, err = Now(ctx, conn); err != nil {
			return nil, time.Time{}, err
		}
	}
	return recs, now, nil
}

// readErr names the fix of a routers table that does not exist (a schema migrated before 015) or that the
// role may not read.
func readErr(schema string, err error) error {
	table := pgx.Identifier{schema, "routers"}.Sanitize()
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01", "3F000":
			return fmt.Errorf("the router's table %s does not exist (the schema predates migration 015): "+
				"run `cdc-router migrate`: %w", table, err)
		case "42501":
			return fmt.Errorf("this role may not read %s: run GRANT SELECT ON %s TO the role as its owner: %w", table, table, err)
		}
	}
	return fmt.Errorf("read %s: %w", table, err)
}
