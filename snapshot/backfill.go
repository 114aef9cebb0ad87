package snapshot

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// BackfillName is the job name of a named backfill.
func BackfillName(name string) string { return "backfill:" + name }

// Backfill re-publishes the retained rows matching cfg.Where while the stream goes on. Each page is its
// own short query on read (no long transaction pins vacuum); progress and quarantined rows go through
// state, a second connection. Rows carry x-backfill and the WAL position the backfill began at. A job of the same name that is still running is resumed from its last confirmed
// key; a finished one is only run again when restart is set.
func Backfill(ctx context.Context, cfg Config, read, state *pgx.Conn, name string, restart bool, pub Publisher,
	log *slog.Logger, term io.Writer) (Job, error) {
	cfg = cfg.withDefaults()
	jobs := NewJobs(state, cfg.Schema)
	job, ok, err := jobs.Load(ctx, BackfillName(name))
	if err != nil {
		return Job{}, err
	}
	switch {
	case ok && job.Done() && !restart:
		return job, fmt.Errorf("backfill %q already finished (%d rows): pass --restart to run it again, or choose another --name", name, job.RowsDone)
	case ok && !job.Done() && job.Predicate != cfg.Where:
		return job, fmt.Errorf("backfill %q is half done with the predicate %q: resume it with that --where, or choose another --name", name, job.Predicate)
	case !ok || job.Done():
		var lsn string
		if err := state.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return Job{}, fmt.Errorf("read WAL position: %w", err)
		}
		job = Job{Name: BackfillName(name), Kind: "backfill", Predicate: cfg.Where}
		if job.ReadLSN, err = cdc.ParseLSN(lsn); err != nil {
			return Job{}, err
		}
		if err := pgx.BeginFunc(ctx, state, func(tx pgx.Tx) error { return jobs.Start(ctx, tx, job) }); err != nil {
			return Job{}, err
		}
		log.Info("backfill started", "job", job.Name, "lsn", job.ReadLSN)
	default:
		log.Info("backfill resumed", "job", job.Name, "rows_done", job.RowsDone)
	}
	left, err := Count(ctx, cfg, read, job.LastKey)
	if err != nil {
		return job, err
	}
	job.RowsTotal = job.RowsDone + left
	if err := jobs.Total(ctx, job.Name, job.RowsTotal); err != nil {
		return job, err
	}
	return Copy(ctx, cfg, read, jobs, job, pub, NewReporter(log, term, job.Name, job.RowsDone))
}
