package pubcheck

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/migrations"
)

// A publication gap is a window in which an outbox table may have been out of the publication (or its
// inserts unpublished) although every check around it found the publication sound: a table dropped from
// the publication and added back between two checks, the publication dropped and recreated, publish =
// 'insert' turned off and on, the table swapped for a new one. Polling the catalog's current state cannot
// see it; the membership's identity can: every one of those changes gives the table a new identity (see
// membershipIdentities), which the checks record (publication_checks.identities) and compare, across
// restarts too. A gap is recorded (publication_checks.gaps) with the backfill that republishes its rows,
// makes the router unready and refuses its next start, until that backfill has run (ClearPublicationGaps).

// gap is one recorded window of one outbox table; Where is the --where of the backfill that covers it.
//
// The rows lost in a gap are those inserted while the table was out of the publication, and the
// transactions that inserted them were running between the two checks; such a transaction may have begun
// long before the first (occurred_at, its start, is then outside the window) and may commit after the
// second, even after the backfill began. So a gap also records the transactions that may have inserted
// rows in it: XidFrom, the oldest one running when the last check that saw the old identity began (every
// later one is newer), and XidTo, an id above every id given when the check that saw the new identity had
// read it, so above every writer of the gap: the snapshot's xmax then, raised above every transaction still
// running (xmax alone is the latest completed id plus one, and a transaction still running may have a
// larger id). The backfill selects the rows whose inserting
// transaction (xmin) is in [XidFrom, XidTo), or, for a row an UPDATE gave a later xmin, whose occurred_at
// (the timestamp column of a mapped table) is in the window,
// and first waits for those of them that still run and write the table (AwaitGapWriters): their rows are
// in no snapshot until they commit (seed 8126 of the harness lost 1,065 rows of a 36,763-row transaction
// that began before a 0.3 s gap and committed after its backfill had started).
type gap struct {
	Table   string     `json:"table"`
	From    *time.Time `json:"from,omitempty"`     // the last check that saw the old identity; nil: none did
	To      time.Time  `json:"to"`                 // the check that saw the new one
	XidFrom string     `json:"xid_from,omitempty"` // full transaction id (xid8); "": not known (the rows up to XidTo)
	XidTo   string     `json:"xid_to,omitempty"`   // full transaction id; "": a gap recorded before 013 (by time)
	Where   string     `json:"where"`
}

// tableKey is table as schema.name, the form gaps and identities are recorded under.
func tableKey(table string) string { return decode.QualifiedTable(table) }

// membershipIdentities reads, for each outbox table, what identifies its membership in the publication: the
// publication's oid and row version (xmin: recreated, or its options edited), the table's oid (swapped),
// and the oid of the row that puts it in (pg_publication_rel, the partitioned root's with
// publish_via_partition_root; pg_publication_namespace for TABLES IN SCHEMA; FOR ALL TABLES has none but
// the publication's). Each of them changes when the table leaves the publication and comes back. It is
// read only after a sound check, and returned with the server's time before it was read (the rows' own
// clock, occurred_at, whatever the router's clock says) and the transactions around the read (see gap):
// xmin, the oldest one running before it, and next, an id given after it (see gap).
func membershipIdentities(ctx context.Context, sql *pgx.Conn, cfg Config) (ids map[string]string, at time.Time, xmin, next string, err error) {
	var version int
	if err := sql.QueryRow(ctx, "SELECT current_setting('server_version_num')::int, now(), "+
		"pg_snapshot_xmin(pg_current_snapshot())::text").Scan(&version, &at, &xmin); err != nil {
		return nil, at, "", "", fmt.Errorf("read server version: %w", err)
	}
	namespace := "''"
	if version >= 150000 { // pg_publication_namespace came with PostgreSQL 15
		namespace = `coalesce((SELECT ' schema ' || pn.oid FROM pg_publication_namespace pn
			WHERE pn.pnpubid = p.oid AND pn.pnnspid = c.relnamespace), '')`
	}
	ids = map[string]string{}
	for _, t := range cfg.tables() {
		ident := migrations.TableIdent(t)
		var id string
		err := sql.QueryRow(ctx, `SELECT 'publication ' || p.oid || ' row ' || p.xmin || ' table ' || c.oid ||
			coalesce((SELECT ' rel ' || r.oid FROM pg_publication_rel r WHERE r.prpubid = p.oid AND r.prrelid = c.oid), '') ||
			`+namespace+` || CASE WHEN p.puballtables THEN ' all tables' ELSE '' END
			FROM pg_publication p, pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE p.pubname = $1 AND n.nspname = $2 AND c.relname = $3`, cfg.Publication, ident[0], ident[1]).Scan(&id)
		if err != nil {
			return nil, at, "", "", fmt.Errorf("read the publication membership of %s: %w", t, err)
		}
		ids[tableKey(t)] = id
	}
	// Above every id given so far without taking one (an id of the check's own would be a transaction that
	// slot creation waits for): the snapshot's xmax covers the completed ones, the transactionid locks every
	// one still running, subtransactions and prepared transactions included (compared as 32-bit ids across
	// wraparound, placed in xmax's epoch).
	if err := sql.QueryRow(ctx, `WITH x AS (SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint AS xmax)
		SELECT (x.xmax + greatest(0, coalesce(max(((l.transactionid::text::bigint - x.xmax % 4294967296 + 4294967296 +
			2147483648) % 4294967296) - 2147483648 + 1), 0)))::text
		FROM x LEFT JOIN pg_locks l ON l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
		GROUP BY x.xmax`).Scan(&next); err != nil {
		return nil, at, "", "", fmt.Errorf("read the next transaction id: %w", err)
	}
	return ids, at, xmin, next, nil
}

// changedTables are the tables of cur whose identity differs from the one seen before; a table seen for the
// first time (a new router, a schema before 008, a table added to the router) has not changed. With
// optionsOnly, a changed publication row (xmin) alone is no change: the caller knows which option changed.
func changedTables(seen, cur map[string]string, tables []string, optionsOnly bool) []string {
	var out []string
	for _, t := range tables {
		old, ok := seen[tableKey(t)]
		now := cur[tableKey(t)]
		if optionsOnly {
			old, now = publicationRow.ReplaceAllString(old, ""), publicationRow.ReplaceAllString(now, "")
		}
		if ok && old != now {
			out = append(out, tableKey(t))
		}
	}
	return out
}

// publicationRow is the part of an identity that changes with the publication's options.
var publicationRow = regexp.MustCompile(` row [0-9]+`)

// lossless says whether a failed check's problem loses no row: a partitioned outbox published under its
// partitions' names (publish_via_partition_root off) sends each row, which the stream refuses or
// quarantines (--on-drift), so a window of only that is no publication gap.
func lossless(problem string) bool {
	return strings.Contains(problem, "publish_via_partition_root = true")
}

// newGap is the window of table from the last sound check that saw its old identity (from, when the oldest
// transaction running was xidFrom) to now (when xidTo was the next transaction id).
func newGap(cfg Config, table string, from *time.Time, xidFrom string, now time.Time, xidTo string) gap {
	g := gap{Table: tableKey(table), From: from, To: now, XidTo: xidTo}
	if from != nil {
		g.XidFrom = xidFrom
	}
	column := "occurred_at"
	if m := decode.MappingFor(cfg.Decode, table); m != nil {
		column = "<a column that orders its rows>"
		if m.TimestampColumn != "" {
			column = m.TimestampColumn
		}
	}
	// Whole seconds, widened outwards: a few more duplicates, never a row short.
	to := now.UTC().Truncate(time.Second).Add(time.Second)
	window := fmt.Sprintf("%s < '%s'", column, to.Format(hintTime))
	if from != nil {
		window = fmt.Sprintf("%s >= '%s' AND %s", column, from.UTC().Truncate(time.Second).Format(hintTime), window)
	}
	switch xids := xidWhere(g.XidFrom, g.XidTo); {
	case xids == "":
		g.Where = window
	case strings.HasPrefix(column, "<"): // a mapped table without a timestamp column: the transactions alone
		g.Where = xids
	default:
		g.Where = "(" + xids + ") OR (" + window + ")"
	}
	return g
}

// xidWhere is the predicate of the rows inserted by the transactions from (inclusive; "" for every one
// before to) to to (exclusive), full transaction ids (xid8): age() compares a row's 32-bit xmin with
// another across wraparound, so the predicate reads the same on any table, native, mapped or partitioned.
// A row frozen more than 2^31 transactions ago may match by chance: a duplicate, never a row short. It is
// "" when to is not known or not a number.
func xidWhere(from, to string) string {
	lo, hi, bounded, ok := xidRange(from, to)
	if !ok {
		return ""
	}
	where := fmt.Sprintf("age(xmin) > age('%d'::xid)", uint32(hi))
	if bounded {
		where = fmt.Sprintf("age(xmin) <= age('%d'::xid) AND %s", uint32(lo), where)
	}
	return where
}

// xids says which transactions g's backfill covers, for its description.
func (g gap) xids() string {
	lo, hi, bounded, ok := xidRange(g.XidFrom, g.XidTo)
	switch {
	case !ok:
		return ""
	case bounded:
		return fmt.Sprintf(" by transactions %d to %d", uint32(lo), uint32(hi-1))
	}
	return fmt.Sprintf(" by transactions before %d", uint32(hi))
}

// xidRange parses a gap's transaction ids: ok when to is a number, bounded when from is one too and not
// after it.
func xidRange(from, to string) (lo, hi uint64, bounded, ok bool) {
	hi, err := strconv.ParseUint(to, 10, 64)
	if err != nil {
		return 0, 0, false, false
	}
	lo, err = strconv.ParseUint(from, 10, 64)
	return lo, hi, err == nil && lo <= hi, true
}

// hintTime is how a backfill hint writes a time.
const hintTime = "2006-01-02 15:04:05Z07:00"

// command is the backfill that republishes g's rows.
func (g gap) command(cfg Config) string {
	cmd := "cdc-router backfill "
	if cfg.Slot != "" && cfg.Slot != "cdc_router" { // not the default --slot
		cmd += "--slot " + cfg.Slot + " "
	}
	// The table is named unless it is the only one and the default: a backfill takes its table from the
	// record of a router of one table, and refuses to guess among several.
	if g.Table != tableKey(migrations.Config{}.Defaults().Table) || len(cfg.Decode.MoreTables) > 0 {
		cmd += "--table " + g.Table + " "
	}
	if decode.MappingFor(cfg.Decode, g.Table) != nil {
		cmd += "--config <its file> "
	}
	return cmd + `--where "` + g.Where + `"`
}

// describe is g as one sentence naming its backfill.
func (g gap) describe(cfg Config) string {
	from := "before the router first checked it"
	if g.From != nil {
		from = "between " + g.From.UTC().Format(hintTime) + " and"
	} else {
		from += ", until"
	}
	return fmt.Sprintf("the outbox table %s may have been out of publication %q (dropped from it and added back, the "+
		"publication recreated or its options changed, or the table replaced) %s %s, so rows inserted then%s were never "+
		"streamed and never will be: publish them with `%s` (consumers drop the duplicates)",
		g.Table, cfg.Publication, from, g.To.UTC().Format(hintTime), g.xids(), g.command(cfg))
}

// gapsProblem is the recorded gaps as the router's problem and refusal.
func gapsProblem(cfg Config, gaps []gap) string {
	parts := make([]string, len(gaps))
	for i, g := range gaps {
		parts[i] = g.describe(cfg)
	}
	return strings.Join(parts, "; ") + "; that backfill, once done, clears this (when no row can have been lost, " +
		"clear it with UPDATE " + pgx.Identifier{cfg.Schema, "publication_checks"}.Sanitize() + " SET gaps = NULL WHERE slot = " +
		"'" + strings.ReplaceAll(cfg.Slot, "'", "''") + "'; see docs/howto/change-the-outbox-schema.md#publication-gaps)"
}

// ClearPublicationGaps forgets the recorded publication gaps of slot's table whose backfill is the one
// with where: the backfill command (given that --slot, as the gap's command names it) calls it once it is
// done. Another slot's gap stays: its router may publish elsewhere. It returns the slots it cleared.
func ClearPublicationGaps(ctx context.Context, conn *pgx.Conn, schema, slot, table, where string) ([]string, error) {
	checks := pgx.Identifier{schema, "publication_checks"}.Sanitize()
	key := map[string]string{"table": tableKey(table), "where": where}
	rows, err := conn.Query(ctx, `UPDATE `+checks+` c SET gaps = (SELECT jsonb_agg(g) FROM jsonb_array_elements(c.gaps) g
		WHERE NOT g @> $1::jsonb) WHERE c.slot = $2 AND c.gaps @> jsonb_build_array($1::jsonb) RETURNING slot`, key, slot)
	if err != nil {
		return nil, fmt.Errorf("clear the publication gaps of %s: %w", table, err)
	}
	slots, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("clear the publication gaps of %s: %w", table, err)
	}
	return slots, nil
}

// RecordedGap is a publication gap recorded for a slot, as `cdc-router status` shows it: the table, the
// window and the backfill that publishes its rows and clears it.
type RecordedGap struct {
	Table    string
	From     *time.Time // nil: before the router first checked the table
	To       time.Time
	Where    string
	Backfill string // the command, as the router's refusal names it
	xidTo    string
}

// RecordedGaps reads the publication gaps recorded for slot whose backfill has not run yet; none when
// the table publication_checks does not exist yet.
func RecordedGaps(ctx context.Context, conn *pgx.Conn, schema, slot string) ([]RecordedGap, error) {
	var exists bool
	checks := pgx.Identifier{schema, "publication_checks"}.Sanitize()
	if err := conn.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, checks).Scan(&exists); err != nil || !exists {
		return nil, err
	}
	var gaps []gap
	err := conn.QueryRow(ctx, `SELECT coalesce(gaps, '[]') FROM `+checks+` WHERE slot = $1`, slot).Scan(&gaps)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the publication gaps of slot %s: %w", slot, err)
	}
	out := make([]RecordedGap, len(gaps))
	for i, g := range gaps {
		out[i] = RecordedGap{Table: g.Table, From: g.From, To: g.To, Where: g.Where, Backfill: g.command(Config{Slot: slot}),
			xidTo: g.XidTo}
	}
	return out, nil
}

// AwaitGapWriters waits, before a backfill of table takes its snapshot while slot has a gap of table
// recorded, until no transaction that may have inserted rows in such a gap (one older than the newest gap's
// XidTo) still holds a write lock on table or one of its partitions in this database: such a transaction's
// rows are in no snapshot until it commits, and the stream never decodes those written while the table was
// out of the publication. Any backfill of the table waits, the gap's own or a wider one an operator wrote.
// Without a gap recorded with transaction ids it waits for nothing. The wait is logged when it begins and
// every 30 s while it lasts, naming the backends (0: a prepared transaction); it ends with ctx.
func AwaitGapWriters(ctx context.Context, conn *pgx.Conn, schema, slot, table string, log *slog.Logger) error {
	gaps, err := RecordedGaps(ctx, conn, schema, slot)
	if err != nil {
		return err
	}
	var hi uint64
	for _, g := range gaps {
		if x, err := strconv.ParseUint(g.xidTo, 10, 64); err == nil && g.Table == tableKey(table) {
			hi = max(hi, x)
		}
	}
	if hi == 0 {
		return nil
	}
	began, told := time.Now(), time.Time{}
	for {
		var pids []int32
		err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT coalesce(x.pid, 0)), '{}')
			FROM pg_locks r JOIN pg_locks x ON x.virtualtransaction = r.virtualtransaction
			WHERE r.locktype = 'relation' AND r.granted
				AND r.mode IN ('RowExclusiveLock', 'ShareRowExclusiveLock', 'ExclusiveLock', 'AccessExclusiveLock')
				AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database())
				AND (r.relation = $1::text::regclass OR r.relation IN (SELECT relid FROM pg_partition_tree($1::text::regclass)))
				AND x.locktype = 'transactionid' AND x.mode = 'ExclusiveLock' AND x.granted
				AND age(x.transactionid) > age($2::text::xid)`,
			migrations.TableIdent(table).Sanitize(), fmt.Sprint(uint32(hi))).Scan(&pids)
		if err != nil {
			return fmt.Errorf("read the transactions writing %s: %w", table, err)
		}
		if len(pids) == 0 {
			if !told.IsZero() {
				log.Info("the transactions that wrote during the publication gap have ended", "table", tableKey(table),
					"waited", time.Since(began).Round(time.Millisecond))
			}
			return nil
		}
		if told.IsZero() || time.Since(told) >= 30*time.Second {
			level := slog.LevelInfo
			if !told.IsZero() {
				level = slog.LevelWarn
			}
			log.Log(ctx, level, "waiting for the transactions that may have written "+tableKey(table)+
				" during the publication gap to end: their rows are in no snapshot until they commit",
				"table", tableKey(table), "backends", pids, "waited", time.Since(began).Round(time.Second))
			told = time.Now()
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}
