package snapshot

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// SeenBy, for an initial snapshot resumed in a new snapshot, is the slot's own snapshot as
	// pg_current_snapshot() printed it (Job.ReadSnapshot), and SeenSince when its job started: the copy
	// then leaves out the rows that snapshot did not see, which the stream delivers (see unseen).
	SeenBy    string
	SeenSince time.Time
	// Streamed, for an initial snapshot resumed in a new snapshot, is the key (StreamKey) by which
	// LeaveStreamed recorded the rows the slot will stream in the reader's temporary table: the copy then
	// leaves them out (streamed.go). Nil: none are left out by it.
	Streamed []string
	// StopBy bounds a copy that ends because its ctx ended (a stop): it waits for the confirms of the rows
	// already published until settle and stores how far they reach by end (run passes the bounds of its
	// --shutdown-timeout). Nil: 5 s for each, counted from when the copy sees the stop.
	StopBy func() (settle, end time.Time)
}

// stopBounds are the bounds of a stopping copy (StopBy, or its default).
func (c Config) stopBounds() (settle, end time.Time) {
	if c.StopBy != nil {
		return c.StopBy()
	}
	now := time.Now()
	return now.Add(5 * time.Second), now.Add(10 * time.Second)
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
	p := "true"
	if c.Where != "" {
		p = "(" + c.Where + ")"
	}
	if u := c.unseen(); u != "" {
		p += " AND NOT (" + u + ")"
	}
	if s := c.streamed(); s != "" {
		p += " AND NOT " + s
	}
	return p
}

// unseen is true for a row of a native table that the snapshot SeenBy did not see: its inserting
// transaction (xmin, placed in the current epoch) committed after that snapshot, so the stream, which
// starts at the slot's consistent point, delivers it. A resumed initial snapshot that published it too
// would put it before an event of its aggregate that only the stream has (a row deleted by its own
// transaction), and so out of commit order. The raw xmin of a row frozen 2^32 transactions ago may fall in
// that window by chance: only rows whose occurred_at is at most an hour before the job started are left
// out, so such an old row is copied (a row of a producer that sets occurred_at an hour back is copied too,
// and may come twice, as before). A mapped table (no occurred_at) is copied whole.
func (c Config) unseen() string {
	if c.SeenBy == "" || c.mapping() != nil {
		return ""
	}
	const cur = "pg_snapshot_xmax(pg_current_snapshot())::text::bigint"
	full := "(((" + cur + " >> 32) << 32) + o.xmin::text::bigint)"
	xid := "greatest(CASE WHEN " + full + " <= " + cur + " THEN " + full + " ELSE " + full + " - 4294967296 END, 0)::text::xid8"
	return "o.occurred_at >= '" + c.SeenSince.UTC().Format(time.RFC3339Nano) + "'::timestamptz - interval '1 hour' AND " +
		"NOT pg_visible_in_snapshot(" + xid + ", '" + strings.ReplaceAll(c.SeenBy, "'", "''") + "'::pg_snapshot)"
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

// The snapshot record of an initial snapshot (Job.ReadSnapshot) is the slot's snapshot, as pg_snapshot
// text, and the storage of the table's leaves as that snapshot saw them: " files:" and oid=relfilenode
// pairs. A resumed copy judges a row by its inserting transaction (xmin), and a rewrite of the table (ALTER
// TABLE … TYPE, most ALTERs that rewrite) gives every row the rewriting transaction's xmin, later than the
// slot's snapshot: judged by it, every row committed before the slot was created would be left to the
// stream, which does not have them (the randomized harness's seed 9441: a copy cut before its first page,
// the headers column retyped, then the resumed copy copied none of 962 rows, all lost). A leaf whose
// relfilenode changed since is such a rewrite, and the resumed copy then copies every row (SeenBy).
const filesMark = " files:"

// SeenRecord is the snapshot record of the slot's snapshot seen and the table's storage files (StorageOf).
func SeenRecord(seen, files string) string {
	if seen == "" || files == "" {
		return seen
	}
	return seen + filesMark + files
}

// StorageOf is the storage of table's leaves (itself, or its partitions') in tx's snapshot:
// oid=relfilenode pairs in oid order.
func StorageOf(ctx context.Context, tx pgx.Tx, table string) (string, error) {
	var files string
	err := tx.QueryRow(ctx, `SELECT coalesce(string_agg(c.oid::text || '=' || c.relfilenode::text, ',' ORDER BY c.oid), '')
		FROM pg_class c WHERE c.relkind = 'r' AND (c.oid = $1::regclass
			OR c.oid IN (SELECT relid FROM pg_partition_tree($1::regclass) WHERE isleaf))`,
		migrations.TableIdent(table).Sanitize()).Scan(&files)
	if err != nil {
		return "", fmt.Errorf("read the storage of %s: %w", table, err)
	}
	return files, nil
}

// SeenBy is the snapshot a resumed copy of table judges rows by (Config.SeenBy), from the job's snapshot
// record: its snapshot, or "" when a leaf that the record names was rewritten since (rewritten then names
// it), so that every row is copied. A record without files (made before they were recorded) is its snapshot.
func SeenBy(ctx context.Context, tx pgx.Tx, table, record string) (seen, rewritten string, err error) {
	seen, files, ok := strings.Cut(record, filesMark)
	if !ok || seen == "" {
		return seen, "", nil
	}
	now, err := StorageOf(ctx, tx, table)
	if err != nil {
		return "", "", err
	}
	current := map[string]string{}
	for _, f := range strings.Split(now, ",") {
		if oid, node, ok := strings.Cut(f, "="); ok {
			current[oid] = node
		}
	}
	for _, f := range strings.Split(files, ",") {
		oid, node, ok := strings.Cut(f, "=")
		if cur, there := current[oid]; ok && there && cur != node {
			return "", fmt.Sprintf("relation %s: storage %s, then %s", oid, node, cur), nil
		}
	}
	return seen, "", nil
}
