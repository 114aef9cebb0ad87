package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
)

// BackfillName is the job name of a named backfill.
func BackfillName(name string) string { return "backfill:" + name }

// ErrJobBusy is returned when another process holds the job's lock (see LockKey).
var ErrJobBusy = errors.New("job busy")

// Backfill re-publishes the retained rows matching cfg.Where while the stream goes on. Each page is its
// own short query on read (no long transaction pins vacuum); progress and quarantined rows go through
// state, a second connection, which holds the job's advisory lock (LockKey) while it runs, so a second
// process with the same name is refused. Rows carry x-backfill and the WAL position the backfill began at.
//
// A job of the same name that is running but no longer held (interrupted) is resumed from its last
// confirmed key, as is a failed one run again with the same predicate; a failed one with another predicate,
// or with restart, starts over; a finished one is only run again when restart is set. An error after the
// job was recorded marks it failed with that error (Jobs.Fail); a stop (ctx ended) leaves it running, to
// resume.
func Backfill(ctx context.Context, cfg Config, read, state *pgx.Conn, name string, restart bool, pub Publisher,
	log *slog.Logger, term io.Writer) (Job, error) {
	cfg = cfg.withDefaults()
	if err := CheckTable(ctx, cfg, read); err != nil {
		return Job{}, err
	}
	unlock, err := lockJob(ctx, state, BackfillName(name))
	if err != nil {
		return Job{}, err
	}
	defer unlock()
	jobs := NewJobs(state, cfg.Schema)
	job, err := prepareBackfill(ctx, cfg, state, jobs, name, restart, log)
	if err != nil {
		return job, err
	}
	job, err = runBackfill(ctx, cfg, read, jobs, job, pub, NewReporter(log, term, job.Name, job.RowsDone))
	if err != nil && ctx.Err() == nil {
		if ferr := jobs.Fail(context.WithoutCancel(ctx), job.Name, err); ferr != nil {
			err = errors.Join(err, ferr)
		}
	}
	return job, err
}

func runBackfill(ctx context.Context, cfg Config, read *pgx.Conn, jobs *Jobs, job Job, pub Publisher,
	rep *Reporter) (Job, error) {
	left, err := Count(ctx, cfg, read, job.LastKey)
	if err != nil {
		return job, err
	}
	job.RowsTotal = job.RowsDone + left
	if err := jobs.Total(ctx, job.Name, job.RowsTotal); err != nil {
		return job, err
	}
	return Copy(ctx, cfg, read, jobs, job, pub, rep)
}

// prepareBackfill applies the rules of Backfill's doc to the stored job and records the start or resumption.
func prepareBackfill(ctx context.Context, cfg Config, state *pgx.Conn, jobs *Jobs, name string, restart bool,
	log *slog.Logger) (Job, error) {
	job, ok, err := jobs.Load(ctx, BackfillName(name))
	if err != nil {
		return Job{}, err
	}
	switch {
	case ok && job.Done() && !restart:
		return job, fmt.Errorf("backfill %q already finished (%d rows): pass --restart to run it again, or choose another --name", name, job.RowsDone)
	case ok && job.State == StateRunning && job.Predicate != cfg.Where:
		return job, fmt.Errorf("backfill %q was interrupted half done with the predicate %q: resume it with that --where, "+
			"remove it with `cdc-router jobs remove %s`, or choose another --name", name, job.Predicate, job.Name)
	case ok && job.Failed() && !restart && job.Predicate == cfg.Where:
		if _, err := state.Exec(ctx, `UPDATE `+jobs.table+` SET state = 'running', error = NULL, updated_at = now(),
			finished_at = NULL WHERE name = $1`, job.Name); err != nil {
			return job, fmt.Errorf("record the resumption of %s: %w", job.Name, err)
		}
		log.Info("backfill resumed after a failure", "job", job.Name, "rows_done", job.RowsDone, "error", job.Error)
		return job, nil
	case ok && job.State == StateRunning:
		log.Info("backfill resumed", "job", job.Name, "rows_done", job.RowsDone)
		return job, nil
	}
	if ok && job.Failed() {
		if err := jobs.Delete(ctx, job.Name); err != nil {
			return job, fmt.Errorf("forget the failed %s: %w", job.Name, err)
		}
	}
	var lsn string
	if err := state.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		return Job{}, fmt.Errorf("read WAL position: %w", err)
	}
	job = Job{Name: BackfillName(name), Kind: "backfill", Predicate: cfg.Where, State: StateRunning}
	if job.ReadLSN, err = cdc.ParseLSN(lsn); err != nil {
		return Job{}, err
	}
	if err := pgx.BeginFunc(ctx, state, func(tx pgx.Tx) error { return jobs.Start(ctx, tx, job) }); err != nil {
		return Job{}, err
	}
	log.Info("backfill started", "job", job.Name, "lsn", job.ReadLSN)
	return job, nil
}

// lockJob takes the job's session advisory lock on conn, or returns ErrJobBusy when another session holds
// it. unlock releases it (closing conn does too).
func lockJob(ctx context.Context, conn *pgx.Conn, name string) (unlock func(), err error) {
	var mine bool
	key := LockKey(name)
	if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&mine); err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	if !mine {
		return nil, fmt.Errorf("%s is running in another process: wait for it to end, or stop it: %w", name, ErrJobBusy)
	}
	return func() {
		// Bounded: on a PostgreSQL that stopped answering this would wait for ever; the session's end
		// releases the lock as well.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", key)
	}, nil
}

// ReadRow reads the outbox row whose id is id, as column text by name in the forms decode.MapRow expects
// (nil for NULL); ok is false when there is none. q must be a reader's connection (TimeZone UTC, DateStyle
// ISO, as pgserver.ConnectReader opens it).
func ReadRow(ctx context.Context, q Querier, table, id string) (values map[string]*string, ok bool, err error) {
	raw := make([]*string, len(columnNames))
	dest := make([]any, len(raw))
	for i := range raw {
		dest[i] = &raw[i]
	}
	err = q.QueryRow(ctx, "SELECT "+columns+" FROM "+migrations.TableIdent(table).Sanitize()+" AS o WHERE o.id = $1",
		id).Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", table, err)
	}
	values = make(map[string]*string, len(raw))
	for i, name := range columnNames {
		values[name] = raw[i]
	}
	return values, true, nil
}
