package pubcheck

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/migrations"
)

// Config is what the checks need of the router's configuration.
type Config struct {
	Slot        string
	Schema      string // the router's own schema, which holds publication_checks
	Publication string
	Table       string        // the first outbox table
	Decode      decode.Config // the other outbox tables (MoreTables) and their mappings
	Interval    time.Duration // how often a streaming router checks; default DefaultPublicationCheckInterval
}

// tables lists the outbox tables, Table first, then Decode.MoreTables, as --table gave them.
func (c Config) tables() []string {
	out := []string{c.Table}
	for _, t := range c.Decode.MoreTables {
		out = append(out, t.Table)
	}
	return out
}

// DefaultPublicationCheckInterval is how often a streaming router re-checks that the publication still
// carries the outbox table's inserts.
const DefaultPublicationCheckInterval = 30 * time.Second

// Watch re-checks, while the stream runs, what only the catalog can tell: that the publication
// still exists, publishes inserts and contains the outbox table (each of them, with several). A table dropped from the publication (or
// swapped for a new one of the same name) sends nothing at all on the stream, so without this check the
// router would keep "streaming" while every new row is lost. A failed check makes the router unready,
// is logged at each check and recorded in the publication_checks table, so the refusal at the next start
// can name the rows to backfill. A sound check compares the tables' membership identities with the last
// sound check's (also the last run's, through publication_checks.identities): a table that left and came
// back in between, or a check that failed before, is a publication gap (gap.go), recorded with its
// backfill; the router stays unready and refuses its next start until that backfill has run.
type Watch struct {
	cfg        Config
	log        *slog.Logger
	stats      *metrics.Stats
	next       time.Time
	problem    string            // the last check's problem; empty while the publication is sound
	failed     bool              // a check failed since the last sound one (this run's, or the last run's)
	lossless   bool              // every failed check since the last sound one was lossless (see lossless)
	seen       map[string]string // membership identities by table, as the last sound check saw them
	soundAt    *time.Time        // when the last sound check ran (the recorded ok_at until this run's first)
	soundXmin  string            // the oldest transaction running when it began (the recorded ok_xmin; "": not known)
	recordedAt time.Time         // when this process last recorded a sound check
	gaps       []gap             // the recorded gaps whose backfill has not run yet
}

// NewWatch returns the watch of one stream run; Begin runs its first check.
func NewWatch(cfg Config, log *slog.Logger, stats *metrics.Stats) *Watch {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultPublicationCheckInterval
	}
	return &Watch{cfg: cfg, log: log, stats: stats}
}

// Schedule makes the next check due one interval after now (the stream starts then).
func (w *Watch) Schedule(now time.Time) { w.next = now.Add(w.cfg.Interval) }

// Next is when the next check is due: before it, Due does nothing, so a caller that calls it at every turn
// of a loop can skip building Due's context until then.
func (w *Watch) Next() time.Time { return w.next }

// okRefresh is how often a sound check that changes nothing is recorded: an idle router writes (and makes
// WAL) only this rarely. The recorded ok_at may be that much older than the last sound check, which makes
// the suggested backfill start earlier (more duplicates, never a gap).
const okRefresh = 10 * time.Minute

// Begin loads what the last run recorded and runs the first check on a publication that migrations.Check
// found sound. A recorded gap refuses the process's first start (a *Fatal naming its backfill); after an
// in-process restart it keeps the router unready instead.
func (w *Watch) Begin(ctx context.Context, sql *pgx.Conn, started bool) error {
	var failedAt *time.Time
	var lastProblem, seen, gaps string
	err := sql.QueryRow(ctx, `SELECT ok_at, coalesce(ok_xmin::text, ''), failed_at, coalesce(problem, ''),
		coalesce(identities, '{}')::text, coalesce(gaps, '[]')::text FROM `+w.table()+` WHERE slot = $1`,
		w.cfg.Slot).Scan(&w.soundAt, &w.soundXmin, &failedAt, &lastProblem, &seen, &gaps)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return fmt.Errorf("read the last publication check: %w", err)
	default:
		if err := errors.Join(json.Unmarshal([]byte(seen), &w.seen), json.Unmarshal([]byte(gaps), &w.gaps)); err != nil {
			return fmt.Errorf("read the last publication check: %w", err)
		}
	}
	w.failed, w.lossless = failedAt != nil, failedAt != nil && lossless(lastProblem)
	if err := w.sound(ctx, sql); err != nil {
		return err
	}
	if len(w.gaps) > 0 && !started {
		return &cdc.Fatal{Msg: gapsProblem(w.cfg, w.gaps)}
	}
	return nil
}

func (w *Watch) table() string {
	return pgx.Identifier{w.cfg.Schema, "publication_checks"}.Sanitize()
}

// Due runs the check over the ordinary connection sql when its interval has passed, within ctx (the caller
// bounds it: at most 10 s more).
func (w *Watch) Due(ctx context.Context, sql *pgx.Conn) error {
	if time.Now().Before(w.next) {
		return nil
	}
	w.next = time.Now().Add(w.cfg.Interval)
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	problem, err := publicationProblem(ctx, sql, w.cfg)
	if err != nil {
		return fmt.Errorf("check publication: %w", err)
	}
	if problem != "" {
		w.failedCheck(ctx, sql, problem)
		return nil
	}
	if err := w.sound(ctx, sql); err != nil {
		return fmt.Errorf("check publication: %w", err)
	}
	return nil
}

// failedCheck applies a failed check to the stats, the log and the checks table.
func (w *Watch) failedCheck(ctx context.Context, sql *pgx.Conn, problem string) {
	w.lossless = lossless(problem) && (w.lossless || !w.failed)
	w.problem, w.failed = problem, true
	w.stats.SetProblem(problem)
	var okAt *time.Time
	err := sql.QueryRow(ctx, `INSERT INTO `+w.table()+` (slot, failed_at, problem) VALUES ($1, now(), $2)
		ON CONFLICT (slot) DO UPDATE SET failed_at = coalesce(`+w.table()+`.failed_at, now()), problem = $2
		RETURNING ok_at`, w.cfg.Slot, problem).Scan(&okAt)
	if err != nil {
		w.log.Warn("could not record the failed publication check", "error", err)
	}
	w.log.Error("the outbox's rows are no longer streamed: "+problem+"; "+backfillHint(w.cfg, okAt), "publication", w.cfg.Publication)
}

// sound applies a sound check: it reads the membership identities, records a gap for each table whose
// identity changed (each table, after a failed check that changed none) since the last sound check, and
// records the check when something changed or okRefresh has passed.
func (w *Watch) sound(ctx context.Context, sql *pgx.Conn) error {
	ids, now, xmin, next, err := membershipIdentities(ctx, sql, w.cfg)
	if err != nil {
		return err
	}
	changed := changedTables(w.seen, ids, w.cfg.tables(), w.failed && w.lossless)
	if w.failed && !w.lossless && len(changed) == 0 {
		for _, t := range w.cfg.tables() {
			changed = append(changed, tableKey(t))
		}
	}
	fresh := []gap{}
	for _, t := range changed {
		fresh = append(fresh, newGap(w.cfg, t, w.soundAt, w.soundXmin, now, next))
	}
	if len(fresh) > 0 || w.failed || !maps.Equal(w.seen, ids) || time.Since(w.recordedAt) >= okRefresh {
		var gaps []gap
		err := sql.QueryRow(ctx, `INSERT INTO `+w.table()+` AS c (slot, ok_at, ok_xmin, identities, gaps)
			VALUES ($1, $4, $5::text::xid8, $2, nullif($3::jsonb, '[]'))
			ON CONFLICT (slot) DO UPDATE SET ok_at = $4, ok_xmin = $5::text::xid8, failed_at = NULL, problem = NULL,
				identities = $2, gaps = nullif(coalesce(c.gaps, '[]') || $3::jsonb, '[]')
			RETURNING gaps`, w.cfg.Slot, ids, fresh, now, xmin).Scan(&gaps)
		if err != nil {
			// Nothing moves on: the next check compares with the same last sound one, so a gap found now is
			// found again and recorded then, not forgotten once the table's new identity is the one seen.
			w.log.Warn("could not record the publication check", "error", err)
			if len(fresh) > 0 {
				w.stats.SetProblem(gapsProblem(w.cfg, append(slices.Clip(w.gaps), fresh...)))
				for _, g := range fresh {
					w.log.Error("publication gap: "+g.describe(w.cfg), "publication", w.cfg.Publication, "table", g.Table,
						"backfill", g.command(w.cfg))
				}
			}
			return nil
		}
		w.recordedAt, w.gaps = time.Now(), gaps
	} else if len(w.gaps) > 0 { // a backfill may have cleared them
		var gaps []gap
		if err := sql.QueryRow(ctx, `SELECT gaps FROM `+w.table()+` WHERE slot = $1`, w.cfg.Slot).Scan(&gaps); err == nil {
			w.gaps = gaps
		}
	}
	w.seen, w.soundAt, w.soundXmin, w.failed, w.lossless, w.problem = ids, &now, xmin, false, false, ""
	if len(w.gaps) > 0 {
		w.stats.SetProblem(gapsProblem(w.cfg, w.gaps))
	} else {
		w.stats.SetProblem("")
	}
	for _, g := range fresh {
		w.log.Error("publication gap: "+g.describe(w.cfg), "publication", w.cfg.Publication, "table", g.Table,
			"backfill", g.command(w.cfg))
	}
	w.log.Debug("publication checked", "publication", w.cfg.Publication, "gaps", len(w.gaps))
	return nil
}

// backfillHint says what a failed check means for the rows: those inserted from okAt on (the last sound
// check) are never streamed, and once the publication is fixed the router names the backfill of the
// exact window (a publication gap, gap.go) and refuses to start until it has run.
func backfillHint(cfg Config, okAt *time.Time) string {
	since := ""
	if okAt != nil {
		since = " (since " + okAt.UTC().Format(hintTime) + ", when the router last saw the outbox in it)"
	}
	return "rows inserted while it is so" + since + " are never streamed: once the publication is fixed, the router " +
		"names the `cdc-router backfill` that republishes them and refuses to start until it has run"
}

// publicationProblem says what is wrong with the publication for the first outbox table that has a
// problem, or "" when nothing is.
func publicationProblem(ctx context.Context, sql *pgx.Conn, cfg Config) (string, error) {
	for _, t := range cfg.tables() {
		if problem, err := tableProblem(ctx, sql, cfg.forTable(t)); problem != "" || err != nil {
			return problem, err
		}
	}
	return "", nil
}

// forTable is c checking only table.
func (c Config) forTable(table string) Config {
	c.Table, c.Decode.Table, c.Decode.MoreTables = table, table, nil
	return c
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

// WithBackfillHint adds to a setup problem with the publication (a migrations.Problem) which rows to
// backfill once it is fixed: rows inserted while the outbox was out of the publication were never decoded,
// and never will be. Other errors are returned as they are.
func WithBackfillHint(ctx context.Context, sql *pgx.Conn, cfg Config, err error) error {
	var p *migrations.Problem
	if !errors.As(err, &p) {
		return err
	}
	problem, qerr := publicationProblem(ctx, sql, cfg)
	if qerr != nil || problem == "" {
		return err
	}
	okAt := lastSeen(ctx, sql, cfg)
	if okAt == nil {
		return err
	}
	return &cdc.Fatal{Msg: p.Msg + "; " + backfillHint(cfg, okAt)}
}
