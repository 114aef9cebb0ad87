package initial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/snapshot"
)

// Config is what the initial snapshot needs of the router's configuration (replication.Config's fields of
// the same names).
type Config struct {
	PGURL     string        // the snapshot reader connects here
	PGTimeout time.Duration // bound of each connection attempt of the reader
	Slot      string
	Schema    string        // the router's own schema: the jobs, the stored position, the quarantine
	Table     string        // the first outbox table
	Decode    decode.Config // the row rules, the other outbox tables (MoreTables) and their mappings, the stream's Publication

	Snapshot         string    // "initial": a slot without any record of a position or a snapshot is copied; "never"
	SnapshotWhere    string    // SQL predicate restricting the initial snapshot
	SnapshotPageSize int       // rows per keyset page; snapshot's default when 0
	Progress         io.Writer // a terminal for the progress line, or nil
	RefusalRetry     time.Duration
	// Renew replaces a publisher that a per-message refusal failed (snapshot.Config.Renew); nil: none.
	Renew func(context.Context) (snapshot.Publisher, error)
	// WaitOnPostgres is told each silence probe's wait (pgserver.Silence.Waiting); nil: not told.
	WaitOnPostgres func(what string, since time.Time)
	// StopBy bounds a copy that a stop interrupted (snapshot.Config.StopBy), and the reader's close after
	// it; nil: snapshot's defaults.
	StopBy func() (settle, end time.Time)
}

// closeContext bounds the end of the reader's transaction and connection: by the stop's end during a
// stop, by a few seconds otherwise (pgconn closes the socket even when it expires).
func (c Config) closeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() != nil && c.StopBy != nil {
		_, end := c.StopBy()
		return context.WithDeadline(context.Background(), end)
	}
	return context.WithTimeout(context.Background(), 5*time.Second)
}

// closeReader ends tx and closes reader within closeContext.
func (c Config) closeReader(ctx context.Context, reader *pgx.Conn, tx pgx.Tx) {
	cctx, cancel := c.closeContext(ctx)
	defer cancel()
	if tx != nil {
		tx.Rollback(cctx)
	}
	reader.Close(cctx)
}

// outboxTables lists the outbox tables, Table first, then Decode.MoreTables, as --table gave them.
func (c Config) outboxTables() []string {
	out := []string{c.Table}
	for _, t := range c.Decode.MoreTables {
		out = append(out, t.Table)
	}
	return out
}

// initialName is the job name of table's initial snapshot: InitialName for a router of one table (as
// before a router could read several), InitialTableName for each of several.
func (c Config) initialName(table string) string {
	if len(c.Decode.MoreTables) == 0 {
		return snapshot.InitialName(c.Slot)
	}
	return snapshot.InitialTableName(c.Slot, decode.QualifiedTable(table))
}

// forTable is c reading only table, for its snapshot: the table's own mapping (nil for the native shape)
// becomes the mapping.
func (c Config) forTable(table string) Config {
	c.Decode.Mapping = decode.MappingFor(c.Decode, table)
	c.Table, c.Decode.Table, c.Decode.MoreTables = table, table, nil
	return c
}

// CheckTables refuses, before the slot is created, a table that the initial snapshot could not read
// (snapshot.CheckTable: a mapped table without a primary key, or that does not fit its mapping).
func CheckTables(ctx context.Context, cfg Config, sql *pgx.Conn) error {
	for _, t := range cfg.outboxTables() {
		if err := snapshot.CheckTable(ctx, cfg.forTable(t).snapshotConfig(), sql); err != nil {
			return refusal(err)
		}
	}
	return nil
}

// Job is the initial snapshot of one outbox table.
type Job struct {
	table    string
	job      snapshot.Job
	streamed []string // set when resumed: the key of the rows the slot will stream, which the copy leaves out
}

// snapshotConfig is the copy configuration of the initial snapshot.
func (c Config) snapshotConfig() snapshot.Config {
	return snapshot.Config{Table: c.Table, Schema: c.Schema, Slot: c.Slot, Where: c.SnapshotWhere,
		PageSize: c.SnapshotPageSize, Decode: c.Decode, RefusalRetry: c.RefusalRetry, StopBy: c.StopBy}
}

// Copy records the initial snapshot of every outbox table and copies the rows visible in the slot's exported
// snapshot snapshotName: the rows committed before the consistent point pos.LSN. The caller has just created
// the slot and has not used its replication connection since, so that the snapshot still exists; Copy
// imports it into a REPEATABLE READ transaction on a connection of its own, records the jobs and the position
// pos, and copies. Streaming from the consistent point then adds every later row, none twice. With several
// outbox tables, every table's job is recorded at once and the tables are copied in that one snapshot,
// merged in key order (copyTables).
func Copy(ctx context.Context, cfg Config, log *slog.Logger, stats *metrics.Stats, sql *pgx.Conn, store *offsets.Store,
	pos offsets.Position, snapshotName string, pub snapshot.Publisher) error {
	ctx, end := cfg.watch(ctx)
	return end(copyNew(ctx, cfg, log, stats, sql, store, pos, snapshotName, pub))
}

// copyNew is Copy under its watch.
func copyNew(ctx context.Context, cfg Config, log *slog.Logger, stats *metrics.Stats, sql *pgx.Conn, store *offsets.Store,
	pos offsets.Position, snapshotName string, pub snapshot.Publisher) error {
	point := pos.LSN
	reader, err := pgserver.ConnectReaderWithin(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return err
	}
	tx, err := reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		cfg.closeReader(ctx, reader, nil)
		return fmt.Errorf("begin snapshot transaction: %w", err)
	}
	defer func() { cfg.closeReader(ctx, reader, tx) }() // a commit first makes the rollback a no-op
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapshotName, "'", "''")+"'"); err != nil {
		return fmt.Errorf("import the slot's snapshot: %w", err)
	}
	log.Info("created replication slot with a snapshot", "lsn", point, "snapshot", snapshotName)
	var seen string // recorded with the jobs: a resumed copy leaves out what this snapshot did not see
	if err := tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&seen); err != nil {
		return fmt.Errorf("read the slot's snapshot: %w", err)
	}
	jobs := snapshot.NewJobs(sql, cfg.Schema)
	var todo []Job
	records := map[string]string{}
	for _, t := range cfg.outboxTables() {
		files, err := snapshot.StorageOf(ctx, tx, t) // as the slot's snapshot saw them: see snapshot.SeenBy
		if err != nil {
			return err
		}
		records[t] = snapshot.SeenRecord(seen, files)
		todo = append(todo, Job{table: t, job: snapshot.Job{Name: cfg.initialName(t), Kind: "initial", Predicate: cfg.SnapshotWhere,
			ReadLSN: point}})
	}
	if err := record(ctx, sql, jobs, store, todo, records, pos); err != nil {
		return err
	}
	if err := copyTables(ctx, cfg, log, stats, tx, jobs, todo, pub); err != nil { // all in the slot's snapshot
		return err
	}
	return tx.Commit(ctx)
}

// resumeSnapshot finishes the initial snapshot jobs that a crash interrupted (each table's), or copies
// everything when the slot exists without any record of one. The slot's own snapshot is gone, so the rest
// is read in a new one, which also sees rows committed after the consistent point: the stream delivers
// those. A table whose record tells the rows the slot's snapshot saw (snapshot.SeenBy) leaves out the others;
// for any other table (no record, rewritten since, mapped) the copy reads what the slot will stream and
// leaves that out (snapshot.LeaveStreamed). Rows may be published twice (once here, once streamed), never
// lost.
func resumeSnapshot(ctx context.Context, cfg Config, log *slog.Logger, stats *metrics.Stats, sql *pgx.Conn, todo []Job,
	pub snapshot.Publisher) (err error) {
	ctx, end := cfg.watch(ctx)
	defer func() { err = end(err) }()
	reader, err := pgserver.ConnectReaderWithin(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return err
	}
	if cfg.Decode.Publication != "" {
		if err := snapshot.PrepareStreamed(ctx, reader); err != nil {
			cfg.closeReader(ctx, reader, nil)
			return err
		}
	}
	tx, err := reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		cfg.closeReader(ctx, reader, nil)
		return fmt.Errorf("begin snapshot transaction: %w", err)
	}
	defer func() { cfg.closeReader(ctx, reader, tx) }() // a commit first makes the rollback a no-op
	// The transaction's first statement takes its snapshot, then reads the WAL's end: every transaction the
	// snapshot sees committed before upto, so the slot's changes up to it hold every row it sees since.
	var upto string
	if err := tx.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&upto); err != nil {
		return fmt.Errorf("read the WAL position of the snapshot: %w", err)
	}
	todo = slices.Clone(todo) // its records become what the copy judges by; the caller's stay as stored
	rewritten := make([]string, len(todo))
	keys := map[string][]string{} // the tables whose copy leaves out what the slot will stream, by their key
	for i, j := range todo {
		// The snapshot the copy judges rows by (snapshot.Config.SeenBy): none for a mapped table, nor for one
		// rewritten since the slot was created (snapshot.SeenBy), nor without a record.
		seen := ""
		if j.job.ReadSnapshot != "" && cfg.forTable(j.table).Decode.Mapping == nil {
			if seen, rewritten[i], err = snapshot.SeenBy(ctx, tx, j.table, j.job.ReadSnapshot); err != nil {
				return err
			}
		}
		todo[i].job.ReadSnapshot = seen
		if seen == "" && cfg.Decode.Publication != "" {
			if keys[j.table], err = snapshot.StreamKey(ctx, cfg.forTable(j.table).snapshotConfig(), tx); err != nil {
				return refusal(err)
			}
		}
	}
	counts, err := cfg.leaveStreamed(ctx, log, tx, upto, keys)
	if err != nil {
		return err
	}
	for i, j := range todo {
		msg := "resuming the initial snapshot in a new snapshot: rows committed since the slot was created may be published twice"
		var attrs []any
		switch n, peeked := counts[decode.QualifiedTable(j.table)]; {
		case j.job.ReadSnapshot != "":
			msg = "resuming the initial snapshot in a new snapshot: rows committed since the slot was created are left to the stream"
		case peeked:
			msg = "resuming the initial snapshot in a new snapshot: the rows the slot will stream are left to it"
			attrs = append(attrs, "left_to_stream", n)
			if n > 0 {
				todo[i].streamed = keys[j.table]
			}
		case rewritten[i] != "":
			msg = "resuming the initial snapshot in a new snapshot: the table was rewritten since the slot was created, so " +
				"its rows' transaction ids no longer tell which rows the slot's snapshot saw; every row is copied, and rows " +
				"committed since the slot was created may be published twice"
		}
		log.Warn(msg, append([]any{"table", j.table, "rows_done", j.job.RowsDone, "lsn", j.job.ReadLSN, "rewritten", rewritten[i]},
			attrs...)...)
		if j.job.Predicate != cfg.SnapshotWhere {
			log.Warn("the snapshot resumes with the predicate it started with, not --snapshot-where",
				"predicate", j.job.Predicate, "snapshot_where", cfg.SnapshotWhere)
		}
	}
	if err := copyTables(ctx, cfg, log, stats, tx, snapshot.NewJobs(sql, cfg.Schema), todo, pub); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// leaveStreamed records in tx the rows of the tables of keys that the slot will stream up to upto
// (snapshot.LeaveStreamed), read on a reader's connection of its own; it returns how many per table
// (schema.name), and nothing without such tables.
func (c Config) leaveStreamed(ctx context.Context, log *slog.Logger, tx pgx.Tx, upto string, keys map[string][]string) (map[string]int64, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	at, err := cdc.ParseLSN(upto)
	if err != nil {
		return nil, err
	}
	peek, err := pgserver.ConnectReaderWithin(ctx, c.PGURL, c.PGTimeout)
	if err != nil {
		return nil, err
	}
	defer c.closeReader(ctx, peek, nil)
	began := time.Now()
	counts, err := snapshot.LeaveStreamed(ctx, peek, tx, snapshot.Peek{Slot: c.Slot, Publication: c.Decode.Publication, Upto: at}, keys)
	if err != nil {
		return nil, err
	}
	for t := range keys {
		if _, ok := counts[decode.QualifiedTable(t)]; !ok {
			counts[decode.QualifiedTable(t)] = 0
		}
	}
	log.Info("read what the slot will stream, to leave it out of the resumed copy", "lsn", at, "took", time.Since(began))
	return counts, nil
}

// copyTables copies the jobs of todo in tx. Several native tables whose keys order alike are copied merged
// (snapshot.CopyMerged): each aggregate's rows arrive in version order across the tables. Otherwise (a
// mapped table, keyed by its primary key; see snapshot.Mergeable) they are copied one after the other, in
// key order within each table only, which the log says. Each job reads with the predicate it started with.
func copyTables(ctx context.Context, cfg Config, log *slog.Logger, stats *metrics.Stats, tx pgx.Tx, jobs *snapshot.Jobs,
	todo []Job, pub snapshot.Publisher) error {
	cfgs := make([]snapshot.Config, len(todo))
	for i, j := range todo {
		c := cfg.forTable(j.table)
		c.SnapshotWhere = j.job.Predicate
		cfgs[i] = c.snapshotConfig()
		cfgs[i].Renew = cfg.Renew
		cfgs[i].SeenBy, cfgs[i].SeenSince = j.job.ReadSnapshot, j.job.StartedAt // set when resumed (resumeSnapshot)
		cfgs[i].Streamed = j.streamed
	}
	why := "one table"
	if len(todo) > 1 {
		var err error
		if why, err = snapshot.Mergeable(ctx, cfgs, tx); err != nil {
			return err
		}
		if why != "" {
			log.Info("the initial snapshot copies the tables one after the other, so an aggregate whose rows span "+
				"tables is in version order within each table only: "+why, "tables", len(todo))
		}
	}
	reps := make([]*snapshot.Reporter, len(todo))
	list := make([]snapshot.Job, len(todo))
	done, total := make([]int64, len(todo)), make([]int64, len(todo))
	for i, j := range todo {
		var err error
		if list[i], reps[i], err = prepareCopy(ctx, cfgs[i], cfg.Progress, log, stats, tx, jobs, j.job); err != nil {
			return err
		}
		if why == "" { // one progress for all the tables
			reps[i].Observe = func(d, t int64) {
				done[i], total[i] = d, t
				stats.SnapshotObserved(sum(done), sum(total))
			}
			done[i], total[i] = list[i].RowsDone, list[i].RowsTotal
		}
	}
	depth, watched := pub.(unroutableDepth)
	var before int
	if watched {
		before, watched = depth.UnroutableMessages()
	}
	if why == "" {
		stats.SnapshotProgress(sum(done), sum(total))
		if err := snapshot.CopyMerged(ctx, cfgs, tx, jobs, list, pub, reps); err != nil {
			return err
		}
	} else {
		for i := range todo {
			stats.SnapshotProgress(list[i].RowsDone, list[i].RowsTotal)
			if _, err := snapshot.Copy(ctx, cfgs[i], tx, jobs, list[i], pub, reps[i]); err != nil {
				return err
			}
		}
	}
	if watched {
		if after, ok := depth.UnroutableMessages(); ok && after > before {
			log.Warn("the initial snapshot sent events that no queue was bound for to the unroutable queue: bind the "+
				"consumers' queues, then move them back (docs/howto/handle-unroutable-events.md#the-default-an-alternate-exchange)", "unroutable_gained", after-before)
		}
	}
	return nil
}

// prepareCopy counts the rows job has left, records its total and returns it with its reporter.
func prepareCopy(ctx context.Context, scfg snapshot.Config, term io.Writer, log *slog.Logger, stats *metrics.Stats, tx pgx.Tx, jobs *snapshot.Jobs,
	job snapshot.Job) (snapshot.Job, *snapshot.Reporter, error) {
	left, err := snapshot.Count(ctx, scfg, tx, job.LastKey)
	if err != nil {
		return job, nil, refusal(err)
	}
	job.RowsTotal = job.RowsDone + left
	if err := jobs.Total(ctx, job.Name, job.RowsTotal); err != nil {
		return job, nil, err
	}
	log.Info("initial snapshot", "table", scfg.Table, "rows_total", job.RowsTotal, "rows_left", left, "predicate", scfg.Where)
	stats.SetState(metrics.StateSnapshot, nil)
	rep := snapshot.NewReporter(log, term, job.Name, job.RowsDone)
	rep.Observe = stats.SnapshotObserved
	return job, rep, nil
}

func sum(xs []int64) int64 {
	var n int64
	for _, x := range xs {
		n += x
	}
	return n
}

// unroutableDepth is satisfied by a publisher that can count the messages in its unroutable queue
// (route.Router); the snapshot's end reports what it parked there, which happens when it runs before any
// consumer bound a queue.
type unroutableDepth interface {
	UnroutableMessages() (n int, ok bool)
}

// refusal makes err, from a check of a table or of its predicate, a refusal (cdc.Fatal: the table does not
// fit, the predicate does not work), unless the connection failed it (the network, PostgreSQL shutting down
// or out of resources, a timeout) or a stop ended it: the run is then retried like any other whose
// connection broke, or stops.
func refusal(err error) error {
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	var netErr net.Error
	switch {
	case errors.As(err, &pgErr):
		if class := pgErr.Code[:2]; class == "08" || class == "53" || class == "57" || class == "58" {
			return err
		}
	case errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) || errors.Is(err, pgconn.ErrConnClosed) ||
		errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, context.Canceled):
		return err
	}
	return &cdc.Fatal{Msg: err.Error()}
}

// Unfinished describes the slot's initial snapshot when one is recorded and not done ("4000 of 10000
// rows stored as done"; the first such table's with several), and is "" otherwise.
func Unfinished(ctx context.Context, cfg Config, sql *pgx.Conn) (string, error) {
	all, err := snapshot.NewJobs(sql, cfg.Schema).All(ctx)
	if err != nil {
		return "", err
	}
	for _, j := range all {
		if snapshot.IsInitialOf(j.Name, cfg.Slot) && !j.Done() {
			return fmt.Sprintf("%d of %d rows stored as done", j.RowsDone, j.RowsTotal), nil
		}
	}
	return "", nil
}

// Due finds the initial snapshots still to copy: the unfinished ones, or, for a slot with neither a
// stored position nor any snapshot record and --snapshot=initial, every table's (fresh). An unfinished one
// without --snapshot=initial, or of a table this run does not read, is refused: streaming on would never
// publish its rest.
func Due(ctx context.Context, cfg Config, sql *pgx.Conn, start cdc.LSN, hasStored bool) ([]Job, bool, error) {
	all, err := snapshot.NewJobs(sql, cfg.Schema).All(ctx)
	if err != nil {
		return nil, false, err
	}
	byName := map[string]snapshot.Job{}
	for _, j := range all {
		if snapshot.IsInitialOf(j.Name, cfg.Slot) {
			byName[j.Name] = j
		}
	}
	recorded := len(byName) > 0
	var todo []Job
	for _, t := range cfg.outboxTables() {
		job, ok := byName[cfg.initialName(t)]
		delete(byName, cfg.initialName(t))
		switch {
		case ok && !job.Done() && cfg.Snapshot != "initial":
			what := "slot " + cfg.Slot
			if len(cfg.Decode.MoreTables) > 0 {
				what = t + " (slot " + cfg.Slot + ")"
			}
			return nil, false, cdc.Fatalf("the initial snapshot of %s is unfinished (%d of %d rows): streaming now would never "+
				"publish the rest; start with --snapshot=initial to finish it, or run `cdc-router reset --slot %s` to start over",
				what, job.RowsDone, job.RowsTotal, cfg.Slot)
		case ok && !job.Done():
			todo = append(todo, Job{table: t, job: job})
		}
	}
	for name, job := range byName {
		if !job.Done() {
			return nil, false, cdc.Fatalf("the initial snapshot %s of slot %s is unfinished (%d of %d rows) and belongs to an "+
				"outbox table list other than this run's --table: start with the --table it began with to finish it, or run "+
				"`cdc-router reset --slot %s` to start over", name, cfg.Slot, job.RowsDone, job.RowsTotal, cfg.Slot)
		}
	}
	if len(todo) > 0 || cfg.Snapshot != "initial" || hasStored || recorded {
		return todo, false, nil
	}
	for _, t := range cfg.outboxTables() {
		todo = append(todo, Job{table: t, job: snapshot.Job{Name: cfg.initialName(t), Kind: "initial",
			Predicate: cfg.SnapshotWhere, ReadLSN: start}})
	}
	return todo, true, nil
}

// Finish finishes the initial snapshot jobs todo that a crash interrupted, or, when fresh (the slot exists
// with no record of a position or a snapshot), records them and the position pos first and copies each
// table in a new snapshot, less what the slot will stream (resumeSnapshot).
func Finish(ctx context.Context, cfg Config, log *slog.Logger, stats *metrics.Stats, sql *pgx.Conn, store *offsets.Store,
	pos offsets.Position, todo []Job, fresh bool, pub snapshot.Publisher) error {
	for _, j := range todo { // before a fresh job is recorded: the refusal's fix then works as it says
		if err := snapshot.CheckTable(ctx, cfg.forTable(j.table).snapshotConfig(), sql); err != nil {
			return refusal(err)
		}
	}
	jobs := snapshot.NewJobs(sql, cfg.Schema)
	if fresh {
		log.Warn("the slot exists but no position or snapshot was ever recorded for it: copying the table once in a new snapshot, less what the slot will stream")
		if err := record(ctx, sql, jobs, store, todo, nil, pos); err != nil {
			return err
		}
	}
	return resumeSnapshot(ctx, cfg, log, stats, sql, todo, pub)
}

// record records the jobs todo in one transaction, each with its table's snapshot record (Job.ReadSnapshot,
// snapshot.SeenRecord) that a resumed copy judges rows by (none for a table records lacks), then the
// position pos the stream starts from once they are done.
func record(ctx context.Context, sql *pgx.Conn, jobs *snapshot.Jobs, store *offsets.Store, todo []Job,
	records map[string]string, pos offsets.Position) error {
	err := pgx.BeginFunc(ctx, sql, func(t pgx.Tx) error {
		for _, j := range todo {
			j.job.ReadSnapshot = records[j.table]
			if err := jobs.Start(ctx, t, j.job); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return store.Save(ctx, pos, true)
}
