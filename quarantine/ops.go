package quarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// How a record was handled (handled_how).
const (
	HandledReplayed  = "replayed"
	HandledDiscarded = "discarded"
)

// Record is one row of the quarantine table as the operator commands read it.
type Record struct {
	ID            int64
	Slot          string // a slot name, or backfill:<name>
	LSN           cdc.LSN
	RowKey        string
	CommitLSN     cdc.LSN // zero when not stored
	Table         string
	EventID       string // empty when the row had none
	Reason        string
	Values        []byte // row_values as JSON text ({"column": "text" or null}); nil for a minimal record
	Notes         []byte // value_notes as JSON text; nil when nothing was cut or replaced
	QuarantinedAt time.Time
	CommitTime    time.Time  // its transaction's commit time; zero when not stored (see migration 011)
	HandledAt     *time.Time // nil while not handled
	HandledHow    string     // replayed or discarded
}

// Handled reports whether the record was replayed or discarded.
func (r Record) Handled() bool { return r.HandledAt != nil }

// Records reads the quarantine table and records how an operator handled each row. It never deletes a
// record except through Purge: the table is the audit trail of what did not become an event.
type Records struct {
	conn  *pgx.Conn
	table string
}

// NewRecords returns the operator's access to schema's quarantine table.
func NewRecords(conn *pgx.Conn, schema string) *Records {
	return &Records{conn: conn, table: pgx.Identifier{schema, "quarantine"}.Sanitize()}
}

const recordColumns = `id, slot, lsn::text, row_key, commit_lsn::text, table_name, coalesce(event_id, ''), reason,
	row_values::text, value_notes::text, quarantined_at, commit_time, handled_at, coalesce(handled_how, '')`

func scanRecord(row pgx.Row) (Record, error) {
	var r Record
	var lsn string
	var commit, values, notes *string
	var committed *time.Time
	err := row.Scan(&r.ID, &r.Slot, &lsn, &r.RowKey, &commit, &r.Table, &r.EventID, &r.Reason, &values, &notes,
		&r.QuarantinedAt, &committed, &r.HandledAt, &r.HandledHow)
	if err != nil {
		return r, err
	}
	if committed != nil {
		r.CommitTime = *committed
	}
	if r.LSN, err = cdc.ParseLSN(lsn); err != nil {
		return r, err
	}
	if commit != nil {
		if r.CommitLSN, err = cdc.ParseLSN(*commit); err != nil {
			return r, err
		}
	}
	if values != nil {
		r.Values = []byte(*values)
	}
	if notes != nil {
		r.Notes = []byte(*notes)
	}
	return r, nil
}

// List returns at most limit records (all when limit <= 0), newest first; with open only those not handled.
func (s *Records) List(ctx context.Context, limit int, open bool) ([]Record, error) {
	q := `SELECT ` + recordColumns + ` FROM ` + s.table
	if open {
		q += ` WHERE handled_at IS NULL`
	}
	q += ` ORDER BY quarantined_at DESC, id DESC`
	if limit > 0 {
		q += fmt.Sprintf(" LIMIT %d", limit)
	}
	rows, err := s.conn.Query(ctx, q)
	if err != nil {
		return nil, s.explain(err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Record, error) { return scanRecord(row) })
	if err != nil {
		return nil, s.explain(err)
	}
	return out, nil
}

// Load returns the record with id; ok is false when there is none.
func (s *Records) Load(ctx context.Context, id int64) (r Record, ok bool, err error) {
	r, err = scanRecord(s.conn.QueryRow(ctx, `SELECT `+recordColumns+` FROM `+s.table+` WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return Record{}, false, nil
	}
	if err != nil {
		return Record{}, false, s.explain(err)
	}
	return r, true, nil
}

// MarkHandled records that the record with id was handled (how is HandledReplayed or HandledDiscarded) now.
// It reports false, changing nothing, when the record was handled before.
func (s *Records) MarkHandled(ctx context.Context, id int64, how string) (bool, error) {
	tag, err := s.conn.Exec(ctx, `UPDATE `+s.table+` SET handled_at = now(), handled_how = $2
		WHERE id = $1 AND handled_at IS NULL`, id, how)
	if err != nil {
		return false, s.explain(err)
	}
	return tag.RowsAffected() == 1, nil
}

// Purge deletes the records handled before before and returns how many. Records not handled are never
// purged.
func (s *Records) Purge(ctx context.Context, before time.Time) (int64, error) {
	tag, err := s.conn.Exec(ctx, `DELETE FROM `+s.table+` WHERE handled_at < $1`, before)
	if err != nil {
		return 0, s.explain(err)
	}
	return tag.RowsAffected(), nil
}

func (s *Records) explain(err error) error {
	return fmt.Errorf("%s: %w (has `cdc-router migrate` run, and may this role read and update it?)", s.table, err)
}

// cutColumns returns, from a record's value_notes, the columns whose stored value is not the whole value (cut
// or not valid UTF-8), and whether the values were not stored at all.
func cutColumns(notes []byte) (cols []string, notStored bool, err error) {
	if len(notes) == 0 {
		return nil, false, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(notes, &m); err != nil {
		return nil, false, fmt.Errorf("value_notes is not a JSON object: %w", err)
	}
	for name, raw := range m {
		if name == "values_not_stored" {
			notStored = true
			continue
		}
		var n struct {
			Truncated   bool `json:"truncated"`
			InvalidUTF8 bool `json:"invalid_utf8"`
		}
		if json.Unmarshal(raw, &n) == nil && (n.Truncated || n.InvalidUTF8) {
			cols = append(cols, name)
		}
	}
	return cols, notStored, nil
}
