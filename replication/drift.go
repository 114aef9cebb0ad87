package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/migrations"
)

// DefaultPublicationCheckInterval is how often a streaming router re-checks that the publication still
// carries the outbox table's inserts.
const DefaultPublicationCheckInterval = 30 * time.Second

// publicationWatch re-checks, while the stream runs, what only the catalog can tell: that the publication
// still exists, publishes inserts and contains the outbox table (each of them, with several). A table dropped from the publication (or
// swapped for a new one of the same name) sends nothing at all on the stream, so without this check the
// router would keep "streaming" while every new row is lost. A failed check makes the router unready,
// is logged at each check and recorded in the publication_checks table, so the refusal at the next start
// can name the rows to backfill.
type publicationWatch struct {
	cfg     Config
	log     *slog.Logger
	stats   *Stats
	next    time.Time
	problem string    // the last check's problem; empty while the publication is sound
	okAt    time.Time // when this process last recorded a sound check
}

// okRefresh is how often a sound check that changes nothing is recorded: an idle router writes (and makes
// WAL) only this rarely. The recorded ok_at may be that much older than the last sound check, which makes
// the suggested backfill start earlier (more duplicates, never a gap).
const okRefresh = 10 * time.Minute

// due runs the check when its interval has passed.
func (w *publicationWatch) due(s *session) error {
	if time.Now().Before(w.next) {
		return nil
	}
	w.next = time.Now().Add(w.cfg.PublicationCheckInterval)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	problem, err := publicationProblem(ctx, s.sql, w.cfg)
	if err != nil {
		return fmt.Errorf("check publication: %w", err)
	}
	w.record(ctx, s.sql, problem)
	return nil
}

// record applies one check's outcome to the stats, the log and the checks table.
func (w *publicationWatch) record(ctx context.Context, sql *pgx.Conn, problem string) {
	table := pgx.Identifier{w.cfg.Schema, "publication_checks"}.Sanitize()
	if problem != "" {
		w.problem = problem
		w.stats.setProblem(problem)
		var okAt *time.Time
		err := sql.QueryRow(ctx, `INSERT INTO `+table+` (slot, failed_at, problem) VALUES ($1, now(), $2)
			ON CONFLICT (slot) DO UPDATE SET failed_at = coalesce(`+table+`.failed_at, now()), problem = $2
			RETURNING ok_at`, w.cfg.Slot, problem).Scan(&okAt)
		if err != nil {
			w.log.Warn("could not record the failed publication check", "error", err)
		}
		w.log.Error("the outbox's rows are no longer streamed: "+problem+"; "+backfillHint(w.cfg, okAt), "publication", w.cfg.Publication)
		return
	}
	if w.problem == "" && !w.okAt.IsZero() && time.Since(w.okAt) < okRefresh {
		return
	}
	var okAt, failedAt *time.Time
	err := sql.QueryRow(ctx, `WITH old AS (SELECT ok_at, failed_at FROM `+table+` WHERE slot = $1)
		INSERT INTO `+table+` (slot, ok_at) VALUES ($1, now())
		ON CONFLICT (slot) DO UPDATE SET ok_at = now(), failed_at = NULL, problem = NULL
		RETURNING (SELECT ok_at FROM old), (SELECT failed_at FROM old)`, w.cfg.Slot).Scan(&okAt, &failedAt)
	if err != nil {
		w.log.Warn("could not record the publication check", "error", err)
	} else {
		w.okAt = time.Now()
	}
	if w.problem != "" || failedAt != nil {
		w.log.Error("the outbox table is in the publication again, but rows inserted while it was not were never "+
			"streamed and never will be; "+backfillHint(w.cfg, okAt), "publication", w.cfg.Publication)
	}
	w.problem = ""
	w.stats.setProblem("")
}

// backfillHint names the backfill that republishes the rows a publication gap may have hidden. A mapped
// table (--config) has no occurred_at: the hint names its timestamp column when the mapping has one.
func backfillHint(cfg Config, okAt *time.Time) string {
	table := "" // with several outbox tables, the backfill reads the one named in the problem
	if len(cfg.Decode.MoreTables) > 0 {
		table = "--table <that table> "
	}
	column, mapped := "occurred_at", cfg.Decode.Mapping
	for _, t := range cfg.Decode.MoreTables {
		if mapped == nil {
			mapped = t.Mapping
		}
	}
	switch {
	case mapped != nil && len(cfg.Decode.MoreTables) > 0:
		table += "(and --config <its file> if it is a mapped table) "
		column = "<occurred_at, or a column that orders a mapped table's rows>"
	case mapped != nil:
		table += "--config <its file> "
		column = "<a column that orders its rows>"
		if mapped.TimestampColumn != "" {
			column = mapped.TimestampColumn
		}
	}
	if okAt == nil {
		return "once the publication is fixed, publish the rows inserted meanwhile with `cdc-router backfill " + table + "--where ...`"
	}
	return fmt.Sprintf("once the publication is fixed, publish the rows inserted since the outbox was last seen in it "+
		"with `cdc-router backfill %s--where \"%s >= '%s'\"` (consumers drop the duplicates)",
		table, column, okAt.UTC().Format("2006-01-02 15:04:05Z07:00"))
}

// publicationProblem says what is wrong with the publication for the first outbox table that has a
// problem, or "" when nothing is.
func publicationProblem(ctx context.Context, sql *pgx.Conn, cfg Config) (string, error) {
	for _, t := range cfg.outboxTables() {
		if problem, err := tableProblem(ctx, sql, cfg.forTable(t)); problem != "" || err != nil {
			return problem, err
		}
	}
	return "", nil
}

// tableProblem says what is wrong with the publication for cfg.Table, or "" when nothing is.
func tableProblem(ctx context.Context, sql *pgx.Conn, cfg Config) (string, error) {
	ident := migrations.TableIdent(cfg.Table)
	var inserts, member, viaRoot, partitioned bool
	err := sql.QueryRow(ctx, `SELECT p.pubinsert, EXISTS (SELECT 1 FROM pg_publication_tables t
		WHERE t.pubname = p.pubname AND t.schemaname = $2 AND t.tablename = $3), p.pubviaroot,
		EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = $2 AND c.relname = $3 AND c.relkind = 'p')
		FROM pg_publication p WHERE p.pubname = $1`, cfg.Publication, ident[0], ident[1]).Scan(&inserts, &member, &viaRoot, &partitioned)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Sprintf("publication %q does not exist (run `cdc-router migrate` to create it)", cfg.Publication), nil
	case err != nil:
		return "", err
	case !inserts:
		return fmt.Sprintf("publication %q no longer publishes inserts (ALTER PUBLICATION %s SET (publish = 'insert'))",
			cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize()), nil
	case partitioned && !viaRoot:
		// pg_publication_tables lists the leaf partitions then, and their rows arrive under the leaves' names,
		// which the stream refuses: the fix is the option, not ADD TABLE.
		return fmt.Sprintf("publication %q no longer publishes the partitioned outbox %s under its own name "+
			"(ALTER PUBLICATION %s SET (publish_via_partition_root = true); see docs/partitioning.md for the rows "+
			"written meanwhile)", cfg.Publication, cfg.Table, pgx.Identifier{cfg.Publication}.Sanitize()), nil
	case !member:
		return fmt.Sprintf("publication %q does not contain the outbox table %s (it was dropped from the publication, "+
			"renamed, or replaced by a new table: ALTER PUBLICATION %s ADD TABLE %s)", cfg.Publication, cfg.Table,
			pgx.Identifier{cfg.Publication}.Sanitize(), ident.Sanitize()), nil
	}
	return "", nil
}

// lastSeen is when a router last saw the outbox in the publication, if ever.
func lastSeen(ctx context.Context, sql *pgx.Conn, cfg Config) *time.Time {
	var okAt *time.Time
	_ = sql.QueryRow(ctx, `SELECT ok_at FROM `+pgx.Identifier{cfg.Schema, "publication_checks"}.Sanitize()+
		` WHERE slot = $1`, cfg.Slot).Scan(&okAt)
	return okAt
}
