package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Key is a row's position in keyset order: (aggregate_type, aggregate_id, aggregate_version).
type Key struct {
	AggregateType string
	AggregateID   string
	Version       int64
}

// Job is the stored progress of one snapshot or backfill.
type Job struct {
	Name      string // initial:<slot> or backfill:<name>
	Kind      string // initial or backfill
	Predicate string
	ReadLSN   cdc.LSN
	LastKey   *Key // nil until the first page is confirmed
	RowsDone  int64
	RowsTotal int64
	State     string // running or done
	StartedAt time.Time
	UpdatedAt time.Time
}

// Done reports whether the job finished.
func (j Job) Done() bool { return j.State == "done" }

// InitialName is the job name of a slot's initial snapshot.
func InitialName(slot string) string { return "initial:" + slot }

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
	err = s.conn.QueryRow(ctx, `SELECT name, kind, predicate, read_lsn::text, last_key, rows_done, rows_total, state,
		started_at, updated_at FROM `+s.table+` WHERE name = $1`, name).
		Scan(&j.Name, &j.Kind, &j.Predicate, &lsn, &key, &j.RowsDone, &j.RowsTotal, &j.State, &j.StartedAt, &j.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Job{}, false, nil
	}
	if err != nil {
		return Job{}, false, fmt.Errorf("load snapshot progress: %w", err)
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
	var k []json.RawMessage
	if err := json.Unmarshal(b, &k); err != nil || len(k) != 3 {
		return Key{}, fmt.Errorf("want [type, id, version]: %s", b)
	}
	var key Key
	if err := json.Unmarshal(k[0], &key.AggregateType); err != nil {
		return Key{}, err
	}
	if err := json.Unmarshal(k[1], &key.AggregateID); err != nil {
		return Key{}, err
	}
	return key, json.Unmarshal(k[2], &key.Version)
}

// Start records a new running job, replacing a finished one of the same name.
func (s *Jobs) Start(ctx context.Context, tx pgx.Tx, j Job) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+s.table+` (name, kind, predicate, read_lsn, state)
		VALUES ($1, $2, $3, $4::pg_lsn, 'running')
		ON CONFLICT (name) DO UPDATE SET kind = EXCLUDED.kind, predicate = EXCLUDED.predicate,
			read_lsn = EXCLUDED.read_lsn, last_key = NULL, rows_done = 0, rows_total = 0, state = 'running',
			started_at = now(), updated_at = now(), finished_at = NULL`,
		j.Name, j.Kind, j.Predicate, j.ReadLSN.String())
	if err != nil {
		return fmt.Errorf("record snapshot start: %w", err)
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
		key, _ = json.Marshal([]any{last.AggregateType, last.AggregateID, last.Version})
	}
	_, err := s.conn.Exec(ctx, `UPDATE `+s.table+` SET last_key = coalesce($2, last_key), rows_done = $3,
		rows_total = $4, updated_at = now() WHERE name = $1`, name, key, done, total)
	if err != nil {
		return fmt.Errorf("store snapshot progress: %w", err)
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
		return fmt.Errorf("finish snapshot: %w", err)
	}
	return nil
}

// Delete forgets the job.
func (s *Jobs) Delete(ctx context.Context, name string) error {
	_, err := s.conn.Exec(ctx, `DELETE FROM `+s.table+` WHERE name = $1`, name)
	return err
}

// All lists every job, oldest first, for `status`.
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
		if ok {
			out = append(out, j)
		}
	}
	return out, nil
}
