package outbox

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// ErrVersionConflict is wrapped by Write's error when a concurrent transaction committed (or, at
// REPEATABLE READ and SERIALIZABLE, had committed unseen) the version this event would take. The
// transaction is aborted: roll it back and run the whole transaction again, reading the aggregate anew,
// since the decision it made rests on a stale aggregate. See Retryable.
var ErrVersionConflict = errors.New("outbox: aggregate version conflict")

// Retryable reports whether a transaction that failed with err may succeed when run again from the start:
// ErrVersionConflict, and PostgreSQL's serialization_failure (40001, which SERIALIZABLE transactions can
// also get at COMMIT) and deadlock_detected (40P01). A caller's retry loop:
//
//	for attempt := 1; ; attempt++ {
//		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { /* read, decide, change, w.Write */ })
//		if err == nil || !outbox.Retryable(err) || attempt == 5 {
//			return err
//		}
//		time.Sleep(time.Duration(attempt) * 10 * time.Millisecond) // plus jitter under heavy contention
//	}
func Retryable(err error) bool {
	if errors.Is(err, ErrVersionConflict) {
		return true
	}
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

// Writer writes events into one outbox table. The zero value writes into public.outbox, the table that
// `cdc-router migrate` creates by default. A Writer is safe for concurrent use.
type Writer struct {
	// Table is the outbox table, "schema.table" or "table" (in schema public), as given to cdc-router's
	// --table; empty means public.outbox.
	Table string
}

// Written is what Write wrote: the event's id and the version it got.
type Written struct {
	ID      string
	Version int64
}

// Write inserts ev into the outbox in the caller's pgx transaction (pgx.Tx, also a pgxpool.Tx or a
// savepoint from tx.Begin). With ev.Version zero the event gets version max(aggregate_version)+1 of its
// aggregate as the transaction sees it (its own earlier events included), else ev.Version. A version that
// another transaction holds fails with ErrVersionConflict and aborts the transaction; an ev that fails the
// router's checks fails with ErrInvalidEvent and sends nothing. The traceparent from ctx (WithTraceParent)
// goes into the headers.
func (w Writer) Write(ctx context.Context, tx pgx.Tx, ev Event) (Written, error) {
	return w.write(ctx, pgxTx{tx}, ev)
}

// WriteSQL is Write for database/sql, in the caller's *sql.Tx (any driver that speaks to PostgreSQL and
// returns *pgconn.PgError, such as github.com/jackc/pgx/v5/stdlib, for conflicts to be recognised).
func (w Writer) WriteSQL(ctx context.Context, tx *sql.Tx, ev Event) (Written, error) {
	return w.write(ctx, sqlTx{tx}, ev)
}

// txn is the little that write needs of either driver's transaction.
type txn interface {
	// insert runs an INSERT … RETURNING of one bigint; found is false when it returned no row.
	insert(ctx context.Context, query string, args ...any) (v int64, found bool, err error)
	exec(ctx context.Context, query string) error
}

func (w Writer) write(ctx context.Context, tx txn, ev Event) (Written, error) {
	if err := ev.check(); err != nil {
		return Written{}, err
	}
	tp, ts := TraceParent(ctx)
	headers, err := headersJSON(&ev, traceContext{parent: tp, state: ts})
	if err != nil {
		return Written{}, err
	}
	if ev.ID == "" {
		ev.ID = newUUID()
	}
	schemaVersion := max(ev.SchemaVersion, 1)
	var occurredAt any // NULL: now()
	if !ev.OccurredAt.IsZero() {
		occurredAt = ev.OccurredAt
	}
	table := quoteTable(w.Table)
	var query string
	args := []any{ev.ID, ev.AggregateType, ev.AggregateID, ev.Type, schemaVersion, string(ev.Payload), string(headers), occurredAt}
	if ev.Version == 0 {
		query = fmt.Sprintf(insertNext, table)
	} else {
		query = fmt.Sprintf(insertAt, table)
		args = append(args, ev.Version)
	}
	v, found, err := tx.insert(ctx, query, args...)
	switch {
	case err != nil:
		return Written{}, w.explain(err, &ev)
	case !found:
		// The arbiter said no. Abort the transaction on the server, so that a caller that ignores the
		// error cannot commit the change without its event; its own error is the expected one.
		_ = tx.exec(ctx, abortTxn)
		return Written{}, conflict(&ev, nil)
	}
	return Written{ID: ev.ID, Version: v}, nil
}

// The INSERTs. The unique key (aggregate_type, aggregate_id, aggregate_version) is the arbiter: a row
// holding the version, committed or (waited for, then) committed by a concurrent transaction, makes the
// INSERT return no row. The next version is read in the same statement, from the index of that key.
const (
	columns    = `id, aggregate_type, aggregate_id, event_type, schema_version, payload, headers, occurred_at, aggregate_version`
	values     = `$1::uuid, $2::text, $3::text, $4::text, $5::int, $6::text::jsonb, $7::text::jsonb, coalesce($8::timestamptz, now())`
	onConflict = ` ON CONFLICT (aggregate_type, aggregate_id, aggregate_version) DO NOTHING RETURNING aggregate_version`
	insertAt   = `INSERT INTO %s (` + columns + `) VALUES (` + values + `, $9::bigint)` + onConflict
	insertNext = `INSERT INTO %[1]s (` + columns + `) SELECT ` + values + `, coalesce(max(o.aggregate_version), 0) + 1
		FROM %[1]s o WHERE o.aggregate_type = $2::text AND o.aggregate_id = $3::text` + onConflict
	abortTxn = `DO $outbox$ BEGIN RAISE EXCEPTION 'cdc-router outbox: aggregate version conflict, this transaction must be rolled back and retried' USING ERRCODE = 'serialization_failure'; END $outbox$`
)

// conflict is the ErrVersionConflict for ev; cause is PostgreSQL's error when there is one.
func conflict(ev *Event, cause error) error {
	which := "the next version"
	if ev.Version != 0 {
		which = fmt.Sprintf("version %d", ev.Version)
	}
	msg := fmt.Sprintf("%s of %s %q is already taken, by a concurrent transaction (or by an earlier write of this "+
		"one with the same explicit Version): roll back and run the whole transaction again (outbox.Retryable)",
		which, ev.AggregateType, ev.AggregateID)
	if cause != nil {
		return fmt.Errorf("%w: %s: %w", ErrVersionConflict, msg, cause)
	}
	return fmt.Errorf("%w: %s", ErrVersionConflict, msg)
}

// explain turns PostgreSQL's error into one that names the fix, keeping it wrapped.
func (w Writer) explain(err error, ev *Event) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40001": // REPEATABLE READ, SERIALIZABLE: the version is held by a row this snapshot cannot see
			return conflict(ev, err)
		case "42P10":
			return fmt.Errorf("outbox: table %s has no unique key on (aggregate_type, aggregate_id, aggregate_version), "+
				"without which two writers could write one version twice; add it (cdc-router migrate creates it): %w", w.table(), err)
		case "42P01":
			return fmt.Errorf("outbox: table %s does not exist: run cdc-router migrate, or set Writer.Table to the --table "+
				"the router reads: %w", w.table(), err)
		case "23505":
			return fmt.Errorf("outbox: write %s.%s event of %s %q: the id %s is already in the outbox (leave Event.ID empty "+
				"for a new one): %w", ev.AggregateType, ev.Type, ev.AggregateType, ev.AggregateID, ev.ID, err)
		}
	}
	return fmt.Errorf("outbox: write %s.%s event of %s %q: %w", ev.AggregateType, ev.Type, ev.AggregateType, ev.AggregateID, err)
}

func (w Writer) table() string {
	if w.Table == "" {
		return "public.outbox"
	}
	return w.Table
}

// quoteTable quotes "schema.table" or "table" (schema public) as an SQL identifier, as cdc-router's
// --table is read.
func quoteTable(table string) string {
	if table == "" {
		table = "public.outbox"
	}
	if s, t, ok := strings.Cut(table, "."); ok {
		return pgx.Identifier{s, t}.Sanitize()
	}
	return pgx.Identifier{"public", table}.Sanitize()
}

type pgxTx struct{ tx pgx.Tx }

func (t pgxTx) insert(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var v int64
	err := t.tx.QueryRow(ctx, query, args...).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

func (t pgxTx) exec(ctx context.Context, query string) error {
	_, err := t.tx.Exec(ctx, query)
	return err
}

type sqlTx struct{ tx *sql.Tx }

func (t sqlTx) insert(ctx context.Context, query string, args ...any) (int64, bool, error) {
	var v int64
	err := t.tx.QueryRowContext(ctx, query, args...).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil
	}
	return v, err == nil, err
}

func (t sqlTx) exec(ctx context.Context, query string) error {
	_, err := t.tx.ExecContext(ctx, query)
	return err
}
