package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
)

// Publisher takes events to the broker; route.Router satisfies it.
type Publisher interface {
	// Publish blocks while the window is full; done is called once, only after a positive confirm.
	Publish(ctx context.Context, ev cdc.Event, done func()) error
	Failed() <-chan struct{}
	Err() error
}

// Querier runs the page queries: a transaction holding the slot's snapshot, or a connection. It must not
// be the connection of the Jobs store, which is written (progress, quarantine records) while a page is read.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config says what to copy.
type Config struct {
	Table    string        // outbox table; default public.outbox
	Schema   string        // the router's schema (quarantine, progress); default cdc_router
	Slot     string        // slot name recorded with quarantined rows
	Where    string        // SQL predicate restricting the rows; empty means all
	PageSize int           // rows per keyset page; default 2000
	Rate     float64       // rows per second at most; 0 means unlimited
	Decode   decode.Config // row rules, shared with the stream; Table's mapping there (decode.MappingFor) reads it through that
	// Renew replaces a publisher that failed with a per-message refusal (cdc.PerMessage) by a new one, for
	// the copy's safety net (refusals.go); it closes the failed one. Nil: such a failure ends the copy.
	Renew func(ctx context.Context) (Publisher, error)
	// RefusalRetry is how long a row the broker returns or nacks is retried alone before it is
	// quarantined; 0 means cdc.DefaultRefusalRetry.
	RefusalRetry time.Duration
}

func (c Config) withDefaults() Config {
	if c.Table == "" {
		c.Table = "public.outbox"
	}
	if c.Schema == "" {
		c.Schema = "cdc_router"
	}
	if c.PageSize <= 0 {
		c.PageSize = 2000
	}
	if c.Decode.Table == "" {
		c.Decode.Table = c.Table
	}
	return c
}

// columns are read as text, in the form the decoder's row mapping expects (the reader's session runs with
// TimeZone=UTC and DateStyle=ISO). Every reference is qualified with the table alias o: an unqualified
// ORDER BY aggregate_version would sort by the text output column ("10" before "9") and the keyset would
// then skip rows.
const columns = `o.id::text, o.aggregate_type, o.aggregate_id, o.aggregate_version::text, o.event_type,
	o.schema_version::text, o.payload::text, o.headers::text, o.occurred_at::text`

var columnNames = []string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "event_type",
	"schema_version", "payload", "headers", "occurred_at"}

func (c Config) predicate() string {
	if c.Where == "" {
		return "true"
	}
	return "(" + c.Where + ")"
}

func (c Config) from() string {
	return " FROM " + migrations.TableIdent(c.Table).Sanitize() + " AS o WHERE " + c.predicate()
}

// pageQuery reads the next page in key order; nullable says whether a key column allows NULL. A row
// comparison with a NULL in it is NULL, so a row with a NULL key part is never after anything: where the
// key columns allow NULL, pages read only complete keys and such rows are read by the NULL-key pass
// instead (see nullKeyQuery). Each row is columnNames, then the keyset's extra columns.
func (c Config) pageQuery(ks keyset, after *Key, nullable bool) (string, []any) {
	q := "SELECT " + columns + ks.selectExtra() + c.from()
	if nullable {
		q += " AND " + ks.complete()
	}
	var args []any
	if after != nil {
		var pred string
		pred, args = ks.after(after)
		q += " AND " + pred
	}
	q += ks.orderBy() + fmt.Sprintf(" LIMIT %d", c.PageSize)
	return q, args
}

// nullKeyQuery reads, in one pass after the pages, every row whose key has a NULL part, with its ctid to
// tell such rows apart (the unique key does not: NULLs are distinct). Each row is columnNames, the
// keyset's extra columns, then the ctid.
func (c Config) nullKeyQuery(ks keyset) string {
	return "SELECT " + columns + ks.selectExtra() + ", o.ctid::text" + c.from() + " AND " + ks.hasNull() +
		" ORDER BY o.tableoid, o.ctid"
}

// nullableKey reports whether any keyset column of the table allows NULL. The setup check refuses that for
// `run`, but a row must never be skipped, so the copy does not rely on it.
func nullableKey(ctx context.Context, cfg Config, q Querier, ks keyset) (bool, error) {
	names := []string{"aggregate_type", "aggregate_id", "aggregate_version"}
	for _, c := range ks.extra {
		names = append(names, c.name)
	}
	var n int
	err := q.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = to_regclass($1) AND NOT attnotnull
		AND attname = ANY($2::text[])`, migrations.TableIdent(cfg.Table).Sanitize(), names).Scan(&n)
	if err != nil {
		return false, fmt.Errorf("read key columns of %s: %w", cfg.Table, err)
	}
	return n > 0, nil
}

// Count returns how many rows the job has left to copy: those after the key, and those with a NULL key part.
func Count(ctx context.Context, cfg Config, q Querier, after *Key) (int64, error) {
	cfg = cfg.withDefaults()
	if cfg.mapping() != nil {
		mt, err := readMappedTable(ctx, cfg, q)
		if err != nil {
			return 0, err
		}
		return mt.count(ctx, cfg, q, after)
	}
	ks, err := readKeyset(ctx, cfg, q)
	if err != nil {
		return 0, err
	}
	nullable, err := nullableKey(ctx, cfg, q, ks)
	if err != nil {
		return 0, err
	}
	sql := "SELECT count(*)" + cfg.from()
	var args []any
	if after != nil {
		var pred string
		pred, args = ks.after(after)
		if nullable {
			sql += " AND (" + pred + " OR " + ks.hasNull() + ")"
		} else {
			sql += " AND " + pred
		}
	}
	var n int64
	if err := q.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, explainQuery(err, cfg)
	}
	return n, nil
}

// explainQuery turns a bad predicate into one sentence.
func explainQuery(err error, cfg Config) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && cfg.Where != "" && (pgErr.Code[:2] == "42" || pgErr.Code[:2] == "22") {
		return fmt.Errorf("the predicate %q does not work on %s (%s): fix --snapshot-where / --where", cfg.Where,
			cfg.Table, pgErr.Message)
	}
	return fmt.Errorf("read %s: %w", cfg.Table, err)
}
