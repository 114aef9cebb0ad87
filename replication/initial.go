package replication

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/snapshot"
)

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

// checkSnapshotTables refuses, before the slot is created, a table that the initial snapshot could not
// read (snapshot.CheckTable: a mapped table without a primary key, or that does not fit its mapping).
func checkSnapshotTables(ctx context.Context, cfg Config, sql *pgx.Conn) error {
	for _, t := range cfg.outboxTables() {
		if err := snapshot.CheckTable(ctx, cfg.forTable(t).snapshotConfig(), sql); err != nil {
			return &Fatal{Msg: err.Error()}
		}
	}
	return nil
}

// initialJob is the initial snapshot of one outbox table.
type initialJob struct {
	table string
	job   snapshot.Job
}

// snapshotConfig is the copy configuration of the initial snapshot.
func (c Config) snapshotConfig() snapshot.Config {
	return snapshot.Config{Table: c.Table, Schema: c.Schema, Slot: c.Slot, Where: c.SnapshotWhere,
		PageSize: c.SnapshotPageSize, Decode: c.Decode, RefusalRetry: c.RefusalRetry}
}

// createWithSnapshot creates the slot with an exported snapshot, imports it into a REPEATABLE READ
// transaction on a second connection before the replication connection runs anything else, records the
// job and the position, and copies the rows visible in exactly that snapshot: the rows committed before
// the consistent point. Streaming from the consistent point then adds every later row, none twice. With
// several outbox tables, every table's job is recorded at once and the tables are copied in that one
// snapshot, merged in key order (copyTables).
func createWithSnapshot(ctx context.Context, cfg Config, log *slog.Logger, stats *Stats, conn *pgconn.PgConn,
	sql *pgx.Conn, store *offsets.Store, sys pglogrepl.IdentifySystemResult, pub Publisher) (cdc.LSN, error) {
	stop := watchCreation(ctx, cfg, log, stats)
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, cfg.Slot, "pgoutput", slotOptions(true, cfg.FailoverSlot))
	stop()
	if err != nil {
		return 0, createError(cfg.Slot, err)
	}
	point, err := cdc.ParseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	reader, err := connectReader(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return 0, err
	}
	defer reader.Close(context.Background())
	tx, err := reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, fmt.Errorf("begin snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(res.SnapshotName, "'", "''")+"'"); err != nil {
		return 0, fmt.Errorf("import the slot's snapshot: %w", err)
	}
	log.Info("created replication slot with a snapshot", "lsn", point, "snapshot", res.SnapshotName)
	var seen string // recorded with the jobs: a resumed copy leaves out what this snapshot did not see
	if err := tx.QueryRow(ctx, "SELECT pg_current_snapshot()::text").Scan(&seen); err != nil {
		return 0, fmt.Errorf("read the slot's snapshot: %w", err)
	}
	jobs := snapshot.NewJobs(sql, cfg.Schema)
	var todo []initialJob
	for _, t := range cfg.outboxTables() {
		todo = append(todo, initialJob{t, snapshot.Job{Name: cfg.initialName(t), Kind: "initial", Predicate: cfg.SnapshotWhere,
			ReadLSN: point}})
	}
	err = pgx.BeginFunc(ctx, sql, func(t pgx.Tx) error {
		for _, j := range todo {
			j.job.ReadSnapshot = seen
			if err := jobs.Start(ctx, t, j.job); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := store.Save(ctx, offsets.Position{LSN: point, SystemID: sys.SystemID, Timeline: sys.Timeline}, true); err != nil {
		return 0, err
	}
	if err := copyTables(ctx, cfg, log, stats, tx, jobs, todo, pub); err != nil { // all in the slot's snapshot
		return 0, err
	}
	return point, tx.Commit(ctx)
}

// resumeSnapshot finishes the initial snapshot jobs that a crash interrupted (each table's), or copies
// everything when the slot exists without any record of one. The slot's own snapshot is gone, so the rest
// is read in a new one: rows committed after the consistent point may be published twice (once here, once
// streamed), never lost.
func resumeSnapshot(ctx context.Context, cfg Config, log *slog.Logger, stats *Stats, sql *pgx.Conn, todo []initialJob,
	pub Publisher) error {
	reader, err := connectReader(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return err
	}
	defer reader.Close(context.Background())
	tx, err := reader.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("begin snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.Background())
	for _, j := range todo {
		msg := "resuming the initial snapshot in a new snapshot: rows committed since the slot was created may be published twice"
		if j.job.ReadSnapshot != "" {
			msg = "resuming the initial snapshot in a new snapshot: rows committed since the slot was created are left to the stream"
		}
		log.Warn(msg, "table", j.table, "rows_done", j.job.RowsDone, "lsn", j.job.ReadLSN)
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

// copyTables copies the jobs of todo in tx. Several native tables whose keys order alike are copied merged
// (snapshot.CopyMerged): each aggregate's rows arrive in version order across the tables. Otherwise (a
// mapped table, keyed by its primary key; see snapshot.Mergeable) they are copied one after the other, in
// key order within each table only, which the log says. Each job reads with the predicate it started with.
func copyTables(ctx context.Context, cfg Config, log *slog.Logger, stats *Stats, tx pgx.Tx, jobs *snapshot.Jobs,
	todo []initialJob, pub Publisher) error {
	cfgs := make([]snapshot.Config, len(todo))
	for i, j := range todo {
		c := cfg.forTable(j.table)
		c.SnapshotWhere = j.job.Predicate
		cfgs[i] = c.snapshotConfig()
		cfgs[i].SeenBy, cfgs[i].SeenSince = j.job.ReadSnapshot, j.job.StartedAt // set when resumed (resumeSnapshot)
		if r, ok := pub.(*renewable); ok {
			cfgs[i].Renew = r.renew
		}
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
				stats.snapshotObserved(sum(done), sum(total))
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
		stats.snapshotProgress(sum(done), sum(total))
		if err := snapshot.CopyMerged(ctx, cfgs, tx, jobs, list, pub, reps); err != nil {
			return err
		}
	} else {
		for i := range todo {
			stats.snapshotProgress(list[i].RowsDone, list[i].RowsTotal)
			if _, err := snapshot.Copy(ctx, cfgs[i], tx, jobs, list[i], pub, reps[i]); err != nil {
				return err
			}
		}
	}
	if watched {
		if after, ok := depth.UnroutableMessages(); ok && after > before {
			log.Warn("the initial snapshot sent events that no queue was bound for to the unroutable queue: bind the "+
				"consumers' queues, then move them back (docs/operations.md, Unroutable events)", "unroutable_gained", after-before)
		}
	}
	return nil
}

// prepareCopy counts the rows job has left, records its total and returns it with its reporter.
func prepareCopy(ctx context.Context, scfg snapshot.Config, term io.Writer, log *slog.Logger, stats *Stats, tx pgx.Tx, jobs *snapshot.Jobs,
	job snapshot.Job) (snapshot.Job, *snapshot.Reporter, error) {
	left, err := snapshot.Count(ctx, scfg, tx, job.LastKey)
	if err != nil {
		return job, nil, &Fatal{Msg: err.Error()}
	}
	job.RowsTotal = job.RowsDone + left
	if err := jobs.Total(ctx, job.Name, job.RowsTotal); err != nil {
		return job, nil, err
	}
	log.Info("initial snapshot", "table", scfg.Table, "rows_total", job.RowsTotal, "rows_left", left, "predicate", scfg.Where)
	stats.setState(StateSnapshot, nil)
	rep := snapshot.NewReporter(log, term, job.Name, job.RowsDone)
	rep.Observe = stats.snapshotObserved
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

// ConnectReader opens a snapshot or backfill reader's connection, with the output formats the row mapping
// expects: those the replication connection pins, so that a row read here has the text it has in the stream.
// Each attempt ends within DefaultPGTimeout (or the URL's shorter connect_timeout).
func ConnectReader(ctx context.Context, url string) (*pgx.Conn, error) {
	return connectReader(ctx, url, DefaultPGTimeout)
}

// connectReader is ConnectReader with each attempt bounded by d.
func connectReader(ctx context.Context, url string, d time.Duration) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, fatalf("the PostgreSQL URL is invalid: use postgres://user:password@host:5432/dbname in --pg-url (CDC_ROUTER_PG_URL)")
	}
	if err := requirePrimary(&cfg.Config); err != nil {
		return nil, err
	}
	delete(cfg.RuntimeParams, "replication")
	for k, v := range map[string]string{"application_name": "cdc-router reader", "TimeZone": "UTC", "DateStyle": "ISO",
		"client_encoding": "UTF8", "IntervalStyle": "postgres", "bytea_output": "hex", // the text forms pgoutput sends (replicationParams)
		"extra_float_digits": "3", "idle_in_transaction_session_timeout": "0", "statement_timeout": "0"} {
		cfg.RuntimeParams[k] = v
	}
	bound(&cfg.Config, d)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, explainConnectWithin(err, hostOf(&cfg.Config), cfg.ConnectTimeout)
	}
	return conn, nil
}
