package quarantine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Bounds of the texts stored beside the values.
const (
	maxEventID = 255
	maxReason  = 4 << 10
	maxText    = 1 << 10 // slot, table name, PostgreSQL's message
)

// Store writes quarantine records for one slot (a slot name, or backfill:<name> for a backfill).
type Store struct {
	conn  *pgx.Conn
	table string // <schema>.quarantine, quoted
	slot  string

	// failFull, when set, replaces the outcome of inserting the full record (tests force the fallback).
	failFull func() error
}

// NewStore returns the writer of schema's quarantine table for slot. conn is an ordinary connection that is
// not inside a transaction of the caller's (a failed INSERT would abort it).
func NewStore(conn *pgx.Conn, schema, slot string) *Store {
	return &Store{conn: conn, table: pgx.Identifier{schema, "quarantine"}.Sanitize(), slot: slot}
}

// record is one row of the quarantine table as it is sent.
type record struct {
	slot, lsn, rowKey, table, reason  string
	commitLSN, eventID, values, notes *string
	commitTime                        *time.Time
}

// rowKey is the row_key a record of q is stored under: q.RowKey for a snapshot or backfill row, else empty
// for ordinal 0 (the key every record had before ordinals existed) and '#<n>' for ordinal n.
func rowKey(q cdc.Quarantined) string {
	switch {
	case q.RowKey != "":
		return q.RowKey
	case q.Ordinal == 0:
		return ""
	}
	return "#" + strconv.Itoa(q.Ordinal)
}

// Write stores q and returns nil once it is stored, also when a record with its key was stored before (a
// replay). Its content never makes it fail (see the package doc); an error is about the connection, the
// role's rights or the table, and is returned wrapped.
func (s *Store) Write(ctx context.Context, q cdc.Quarantined) error {
	r := record{slot: validText(s.slot, maxText), lsn: q.LSN.String(), rowKey: validText(rowKey(q), 0),
		table: validText(q.Table, maxText), reason: validText(q.Reason, maxReason)}
	if q.CommitLSN != 0 {
		r.commitLSN = ptr(q.CommitLSN.String())
	}
	if !q.CommitTime.IsZero() {
		r.commitTime = &q.CommitTime
	}
	if q.EventID != "" {
		r.eventID = ptr(validText(q.EventID, maxEventID))
	}
	values, notes := encodeValues(q.Columns)
	r.values, r.notes = &values, notes
	err := s.insert(ctx, r, s.failFull)
	var pgErr *pgconn.PgError
	if err == nil || !errors.As(err, &pgErr) || !contentError(pgErr) {
		return s.wrap(err)
	}
	r.values, r.notes = nil, ptr(notStored(validText(pgErr.Message, maxText)))
	err = s.insert(ctx, r, nil)
	if errors.As(err, &pgErr) && contentError(pgErr) {
		err = s.insert(ctx, r.ascii(), nil)
	}
	return s.wrap(err)
}

func (s *Store) wrap(err error) error {
	if err != nil {
		return fmt.Errorf("insert into %s: %w", s.table, err)
	}
	return nil
}

// contentError reports whether PostgreSQL refused the statement because of the values it carried: a data
// exception (class 22) or a program limit (class 54).
func contentError(err *pgconn.PgError) bool {
	return strings.HasPrefix(err.Code, "22") || strings.HasPrefix(err.Code, "54")
}

func (s *Store) insert(ctx context.Context, r record, fail func() error) error {
	if fail != nil {
		return fail()
	}
	_, err := s.conn.Exec(ctx, `INSERT INTO `+s.table+` (slot, lsn, row_key, commit_lsn, table_name, event_id,
			reason, row_values, value_notes, commit_time)
		VALUES ($1, $2::pg_lsn, $3, $4::pg_lsn, $5, $6, $7, $8::jsonb, $9::jsonb, $10)
		ON CONFLICT (slot, lsn, row_key) DO NOTHING`,
		r.slot, r.lsn, r.rowKey, r.commitLSN, r.table, r.eventID, r.reason, r.values, r.notes, r.commitTime)
	return err
}

// notStored is the value_notes of a minimal record.
func notStored(message string) string {
	b, _ := appendString([]byte(`{"values_not_stored":`), []byte(message))
	return string(append(b, '}'))
}

// ascii is the minimal record with every text reduced to ASCII, for a server encoding that cannot hold a
// character of it.
func (r record) ascii() record {
	r.slot, r.rowKey, r.table, r.reason = asciiText(r.slot, `\`), asciiJSON(r.rowKey), asciiText(r.table, `\`),
		asciiText(r.reason, `\`)
	if r.eventID != nil {
		r.eventID = ptr(asciiText(*r.eventID, `\`))
	}
	if r.notes != nil {
		r.notes = ptr(asciiText(*r.notes, `\\`)) // inside JSON strings, the backslash is escaped
	}
	return r
}

// validText makes s valid UTF-8 without NUL (both become U+FFFD) and, when limit > 0, cuts it to at most
// limit bytes on a character boundary.
func validText(s string, limit int) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") && (limit <= 0 || len(s) <= limit) {
		return s
	}
	s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	if limit > 0 && len(s) > limit {
		cut := limit
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut]
	}
	return s
}

// asciiText writes every character above U+007E of s as <backslash>u{XXXX}.
func asciiText(s, backslash string) string {
	var b strings.Builder
	for _, r := range s {
		if r < 0x7F {
			b.WriteRune(r)
			continue
		}
		fmt.Fprintf(&b, "%su{%04X}", backslash, r)
	}
	return b.String()
}

// asciiJSON writes every character above U+007E of the JSON text s (a row key) as a JSON \u escape, a
// surrogate pair above U+FFFF: the same JSON value, in ASCII. row_key is a text column, so no server
// encoding has to translate the escapes.
func asciiJSON(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r < 0x7F:
			b.WriteRune(r)
		case r > 0xFFFF:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&b, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&b, `\u%04x`, r)
		}
	}
	return b.String()
}

func ptr(s string) *string { return &s }
