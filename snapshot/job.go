package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Key is a row's position in keyset order: (aggregate_type, aggregate_id, aggregate_version) and, for a
// partitioned outbox, the text of its partition key columns (Partition, e.g. its occurred_at). It is stored
// as the JSON array [type, id, version, partition...]; a key stored as [type, id, version] (an ordinary
// table, or an older version) stays valid.
//
// A mapped table's key (--config) is its primary key instead (or a unique index on NOT NULL columns): the
// text of its columns in PrimaryKey, stored as the JSON object {"primary_key": [value...]}, which the
// array form of the native shape's key never is.
type Key struct {
	AggregateType string
	AggregateID   string
	Version       int64
	Partition     []string
	PrimaryKey    []string // a mapped table's key columns, as text; nil for the native shape
}

// storedPrimaryKey is the stored form of a mapped table's key.
type storedPrimaryKey struct {
	PrimaryKey []string `json:"primary_key"`
}

// Job is the stored progress of one snapshot or backfill.
type Job struct {
	Name      string // initial:<slot>, initial:<slot>/<schema.table> or backfill:<name>
	Kind      string // initial or backfill
	Predicate string
	ReadLSN   cdc.LSN
	LastKey   *Key // nil until the first page is confirmed
	RowsDone  int64
	RowsTotal int64
	State     string // running, done or failed
	Error     string // why a failed job stopped
	StartedAt time.Time
	UpdatedAt time.Time
	// ReadSnapshot is an initial snapshot's own snapshot as pg_current_snapshot() printed it inside the
	// slot's exported snapshot, followed by the table's storage as that snapshot saw it (SeenRecord; ""
	// for a backfill, and for a job recorded before migration 012): a copy resumed in a new snapshot leaves
	// out what it did not see, unless the table was rewritten since (SeenBy, Config.SeenBy).
	ReadSnapshot string
	// Live reports whether a process holds the job's lock (see LockKey); filled by All. A running job that no
	// process holds was interrupted (a kill, a crash, a stop) and resumes at the next run of it.
	Live bool
}

// Job states.
const (
	StateRunning = "running"
	StateDone    = "done"
	StateFailed  = "failed"
)

// Done reports whether the job finished.
func (j Job) Done() bool { return j.State == StateDone }

// Failed reports whether the job stopped on an error (Error says which).
func (j Job) Failed() bool { return j.State == StateFailed }

// Running reports whether the job is recorded as running and a process holds it.
func (j Job) Running() bool { return j.State == StateRunning && j.Live }

// Interrupted reports whether the job is recorded as running but no process holds it.
func (j Job) Interrupted() bool { return j.State == StateRunning && !j.Live }

// LockKey is the text whose hashtextextended(·, 0) is the session advisory lock held by the process that
// runs the job: for initial:<slot> the router's lock of the slot ('cdc_router:<slot>', taken by run for
// the stream and the initial snapshot alike), for backfill:<name> 'cdc_router:backfill:<name>'. Slot names
// hold no colon, so the two never meet.
func LockKey(name string) string {
	if slot, ok := strings.CutPrefix(name, "initial:"); ok {
		slot, _, _ = strings.Cut(slot, "/") // a table's snapshot of several (InitialTableName) is the slot's too
		return "cdc_router:" + slot
	}
	return "cdc_router:" + name
}

// lockHeld selects the granted advisory locks of key $1 in this database from pg_locks l: a bigint advisory
// key is classid (high 32 bits), objid (low 32 bits) and objsubid 1.
const lockHeld = `SELECT EXISTS (SELECT 1 FROM pg_locks l, (SELECT hashtextextended($1, 0) AS k) h
		WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = ((h.k >> 32) & 4294967295)::oid AND l.objid = (h.k & 4294967295)::oid`

// Locked reports whether some session of this database holds the advisory lock of key (see LockKey). It
// reads pg_locks and takes nothing.
func Locked(ctx context.Context, conn *pgx.Conn, key string) (bool, error) {
	var held bool
	if err := conn.QueryRow(ctx, lockHeld+")", key).Scan(&held); err != nil {
		return false, fmt.Errorf("read advisory locks: %w", err)
	}
	return held, nil
}

// HeldBy reports whether the session of backend pid holds the advisory lock of key (see LockKey), asked on
// conn, another session: it reads pg_locks and takes nothing. A session that ended holds nothing (a new one
// given the same pid within the same moment, by wraparound, is not told apart).
func HeldBy(ctx context.Context, conn *pgx.Conn, key string, pid uint32) (bool, error) {
	var held bool
	if err := conn.QueryRow(ctx, lockHeld+" AND l.pid = $2)", key, int64(pid)).Scan(&held); err != nil {
		return false, fmt.Errorf("read advisory locks: %w", err)
	}
	return held, nil
}

// InitialName is the job name of a slot's initial snapshot, for a router of one outbox table.
func InitialName(slot string) string { return "initial:" + slot }

// InitialTableName is the job name of the initial snapshot of one table (schema.table) of a router that
// reads several outbox tables: each table's progress is kept apart, and the name does not depend on the
// order of --table.
func InitialTableName(slot, table string) string { return InitialName(slot) + "/" + table }

// IsInitialOf reports whether name is an initial snapshot of slot: InitialName or an InitialTableName.
func IsInitialOf(name, slot string) bool {
	return name == InitialName(slot) || strings.HasPrefix(name, InitialName(slot)+"/")
}

// word is what the logs and errors call job name: "backfill" for a backfill, "snapshot" for an initial
// snapshot.
func word(name string) string {
	if strings.HasPrefix(name, BackfillName("")) {
		return "backfill"
	}
	return "snapshot"
}

// Jobs reads and writes the snapshots table of the router's schema.
type Jobs struct {
	conn  *pgx.Conn
	table string
}

// NewJobs returns the job store on an ordinary connection (never the one inside the snapshot).
func NewJobs(conn *pgx.Conn, schema string) *Jobs {
	return &Jobs{conn: conn, table: pgx.Identifier{schema, "snapshots"}.Sanitize()}
}

// Load returns the job called name; ok is false when there is none.
func (s *Jobs) Load(ctx context.Context, name string) (j Job, ok bool, err error) {
	var lsn string
	var key []byte
	var jobErr, seen *string
	err = s.conn.QueryRow(ctx, `SELECT name, kind, predicate, read_lsn::text, last_key, rows_done, rows_total, state,
		to_jsonb(t)->>'error', started_at, updated_at, to_jsonb(t)->>'read_snapshot' FROM `+s.table+` t WHERE name = $1`, name).
		Scan(&j.Name, &j.Kind, &j.Predicate, &lsn, &key, &j.RowsDone, &j.RowsTotal, &j.State, &jobErr, &j.StartedAt,
			&j.UpdatedAt, &seen)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, false, nil
	}
	if err != nil {
		return Job{}, false, fmt.Errorf("load %s progress: %w", word(name), err)
	}
	if jobErr != nil {
		j.Error = *jobErr
	}
	if seen != nil {
		j.ReadSnapshot = *seen
	}
	if j.ReadLSN, err = cdc.ParseLSN(lsn); err != nil {
		return Job{}, false, err
	}
	if key != nil {
		k, err := parseKey(key)
		if err != nil {
			return Job{}, false, fmt.Errorf("snapshot progress of %s: bad last_key: %w", name, err)
		}
		j.LastKey = &k
	}
	return j, true, nil
}

func parseKey(b []byte) (Key, error) {
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] == '{' {
		var pk storedPrimaryKey
		if err := json.Unmarshal(t, &pk); err != nil || pk.PrimaryKey == nil {
			return Key{}, fmt.Errorf("want {\"primary_key\": [value...]}: %s", b)
		}
		return Key{PrimaryKey: pk.PrimaryKey}, nil
	}
	var k []json.RawMessage
	if err := json.Unmarshal(b, &k); err != nil || len(k) < 3 {
		return Key{}, fmt.Errorf("want [type, id, version, partition...]: %s", b)
	}
	var key Key
	if err := json.Unmarshal(k[0], &key.AggregateType); err != nil {
		return Key{}, err
	}
	if err := json.Unmarshal(k[1], &key.AggregateID); err != nil {
		return Key{}, err
	}
	if err := json.Unmarshal(k[2], &key.Version); err != nil {
		return Key{}, err
	}
	for _, raw := range k[3:] {
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return Key{}, fmt.Errorf("partition key value %s: %w", raw, err)
		}
		key.Partition = append(key.Partition, v)
	}
	return key, nil
}

// stored is the stored form of k: [type, id, version, partition...], or {"primary_key": [value...]}.
func (k Key) stored() []byte {
	if k.PrimaryKey != nil {
		b, _ := json.Marshal(storedPrimaryKey{k.PrimaryKey})
		return b
	}
	parts := []any{k.AggregateType, k.AggregateID, k.Version}
	for _, v := range k.Partition {
		parts = append(parts, v)
	}
	b, _ := json.Marshal(parts)
	return b
}

// Start records a new running job, replacing a finished one of the same name. It leaves the error column
// alone (so that it works before migration 006): delete a failed job before starting it again.
func (s *Jobs) Start(ctx context.Context, tx pgx.Tx, j Job) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (name, kind, predicate, read_lsn, state)
		VALUES ($1, $2, $3, $4::pg_lsn, 'running')
		ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, predicate = EXCLUDED.predicate,
			read_lsn = EXCLUDED.read_lsn, last_key = NULL, rows_done = 0, rows_total = 0, state = 'running',
			started_at = now(), updated_at = now(), finished_at = NULL`,
		j.Name, j.Kind, j.Predicate, j.ReadLSN.String())
	if err != nil {
		return fmt.Errorf("record %s start: %w", word(j.Name), err)
	}
	if j.ReadSnapshot != "" { // only an initial snapshot's: a backfill's start needs no migration 012
		if _, err := tx.Exec(ctx, `UPDATE `+s.table+` SET read_snapshot = $2 WHERE name = $1`, j.Name, j.ReadSnapshot); err != nil {
			return fmt.Errorf("record snapshot start: %w", err)
		}
	}
	return nil
}

// Progress stores the last confirmed key and the counts.
func (s *Jobs) Progress(ctx context.Context, name string, last Key, done, total int64) error {
	return s.progress(ctx, name, &last, done, total)
}

// progress stores the counts, and the last confirmed key unless last is nil.
func (s *Jobs) progress(ctx context.Context, name string, last *Key, done, total int64) error {
	var key []byte
	if last != nil {
		key = last.stored()
	}
	_, err := s.conn.Exec(ctx, `UPDATE `+s.table+` SET last_key = coalesce($2, last_key), rows_done = $3,
		rows_total = $4, updated_at = now() WHERE name = $1`, name, key, done, total)
	if err != nil {
		return fmt.Errorf("store %s progress: %w", word(name), err)
	}
	return nil
}

// Total stores the row count once it is known.
func (s *Jobs) Total(ctx context.Context, name string, total int64) error {
	_, err := s.conn.Exec(ctx, `UPDATE `+s.table+` SET rows_total = $2, updated_at = now() WHERE name = $1`, name, total)
	return err
}

// Finish marks the job done.
func (s *Jobs) Finish(ctx context.Context, name string, done int64) error {
	_, err := s.conn.Exec(ctx, `UPDATE `+s.table+` SET state = 'done', rows_done = $2, updated_at = now(),
		finished_at = now() WHERE name = $1`, name, done)
	if err != nil {
		return fmt.Errorf("finish %s: %w", word(name), err)
	}
	return nil
}

// Fail records that the job stopped on cause: state failed, the error, the time. Its last confirmed key
// stays, so a rerun with the same predicate resumes after it.
func (s *Jobs) Fail(ctx context.Context, name string, cause error) error {
	_, err := s.conn.Exec(ctx, `UPDATE `+s.table+` SET state = 'failed', error = $2, updated_at = now(),
		finished_at = now() WHERE name = $1`, name, cause.Error())
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &pgErr) && (pgErr.Code == "42703" || pgErr.Code == "42P01"): // undefined column, table
		return fmt.Errorf("record the failure of %s (has `cdc-router migrate` run?): %w", name, err)
	case !errors.As(err, &pgErr): // no answer: the connection is gone, and the job stays recorded as running
		return fmt.Errorf("could not record the failure of %s, PostgreSQL's connection being gone (%w): it shows as "+
			"interrupted, and the same command resumes it", name, err)
	}
	return fmt.Errorf("record the failure of %s: %w", name, err)
}

// Delete forgets the job.
func (s *Jobs) Delete(ctx context.Context, name string) error {
	_, err := s.conn.Exec(ctx, `DELETE FROM `+s.table+` WHERE name = $1`, name)
	return err
}

// All lists every job, oldest first, for `status` and `jobs list`, each with Live filled in.
func (s *Jobs) All(ctx context.Context) ([]Job, error) {
	rows, err := s.conn.Query(ctx, `SELECT name FROM `+s.table+` ORDER BY started_at`)
	if err != nil {
		return nil, err
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	var out []Job
	for _, n := range names {
		j, ok, err := s.Load(ctx, n)
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if j.Live, err = Locked(ctx, s.conn, LockKey(j.Name)); err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// Remove forgets the job called name, holding its lock while it does, so that no process starts or
// resumes it meanwhile. It refuses a job that a process runs (ErrJobBusy) and an initial snapshot (it
// belongs to its slot: `cdc-router reset` removes it with the slot); a finished, failed or interrupted
// backfill is removed. ok is false when there is no such job.
func (s *Jobs) Remove(ctx context.Context, name string) (ok bool, err error) {
	if strings.HasPrefix(name, "initial:") {
		slot, _, _ := strings.Cut(strings.TrimPrefix(name, "initial:"), "/")
		return false, fmt.Errorf("%s is the initial snapshot of slot %s: `cdc-router reset --slot %s` removes it "+
			"together with the slot and its position", name, slot, slot)
	}
	unlock, err := lockJob(ctx, s.conn, name)
	if err != nil {
		return false, err
	}
	defer unlock()
	tag, err := s.conn.Exec(ctx, `DELETE FROM `+s.table+` WHERE name = $1`, name)
	if err != nil {
		return false, fmt.Errorf("remove %s: %w", name, err)
	}
	return tag.RowsAffected() == 1, nil
}
