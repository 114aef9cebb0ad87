package snapshot

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
)

// An initial snapshot resumed in a new snapshot sees rows committed after the slot's consistent point,
// which the stream delivers too, in commit order with the rows only the stream has: a row inserted and
// deleted by its own transaction, or in a partition dropped since. Copied as well, such an aggregate's
// later versions would arrive before those (the randomized harness's seeds 7155, 9431, 9441 and 9483). Where
// no record of the slot's own snapshot tells those rows apart (Config.SeenBy: a slot without a record, a
// table rewritten since, a mapped table), the resumed copy reads what the slot will stream, without
// consuming it (pg_logical_slot_peek_binary_changes, with the stream's pgoutput options), up to a position
// past every transaction its own snapshot sees, and leaves out every row whose key an insert there names
// (Config.Streamed): each such row comes once, from the stream, in commit order.

// streamedTable is the temporary table of the reader's session that holds the keys of the rows the slot
// will stream: tbl is the table (schema.name), k the key's values as text (StreamKey's columns).
const streamedTable = "cdc_router_streamed"

// PrepareStreamed creates, on the reader's connection and outside its snapshot's transaction (a READ ONLY
// transaction may write to a temporary table but not create one), the temporary table LeaveStreamed fills.
func PrepareStreamed(ctx context.Context, conn *pgx.Conn) error {
	_, err := conn.Exec(ctx, `CREATE TEMPORARY TABLE IF NOT EXISTS `+streamedTable+` (tbl text NOT NULL, k text[] NOT NULL);
		CREATE INDEX IF NOT EXISTS `+streamedTable+`_k ON pg_temp.`+streamedTable+` (tbl, k)`)
	if err != nil {
		return fmt.Errorf("create the table of the rows the slot will stream: %w", err)
	}
	return nil
}

// StreamKey is the key LeaveStreamed records a row of cfg.Table by: a native table's aggregate key and
// event id, a mapped table's key (its primary key, or the unique index its copy pages by).
func StreamKey(ctx context.Context, cfg Config, q Querier) ([]string, error) {
	cfg = cfg.withDefaults()
	if cfg.mapping() == nil {
		return []string{"aggregate_type", "aggregate_id", "aggregate_version", "id"}, nil
	}
	mt, err := readMappedTable(ctx, cfg, q)
	if err != nil {
		return nil, err
	}
	names := make([]string, len(mt.key))
	for i, c := range mt.key {
		names[i] = c.name
	}
	return names, nil
}

// streamed is true for a row whose key LeaveStreamed recorded (Config.Streamed); "" without one.
func (c Config) streamed() string {
	if len(c.Streamed) == 0 {
		return ""
	}
	parts := make([]string, len(c.Streamed))
	for i, n := range c.Streamed {
		parts[i] = "o." + pgx.Identifier{n}.Sanitize() + "::text"
	}
	return "EXISTS (SELECT 1 FROM pg_temp." + streamedTable + " s WHERE s.tbl = '" +
		strings.ReplaceAll(decode.QualifiedTable(c.Table), "'", "''") + "' AND s.k = ARRAY[" + strings.Join(parts, ", ") + "])"
}

// Peek says which changes LeaveStreamed reads: those the slot will stream through Publication (proto_version 1,
// as the stream reads them), up to the first record that ends at or after Upto.
type Peek struct {
	Slot, Publication string
	Upto              cdc.LSN
}

// LeaveStreamed reads, on peek (a reader's connection: the column values come as text in the reader's forms),
// what the slot will stream, and records in tx's temporary table (PrepareStreamed) the key of every row of
// the tables of keys (table → StreamKey) that an insert there names. It returns how many keys it recorded
// per table. It waits until Upto is flushed (the SQL interface decodes flushed WAL only). tx must hold the
// snapshot the copy reads in, taken before Upto was read, so that every transaction it sees committed before
// Upto. The slot must not be streamed meanwhile (PostgreSQL refuses: the slot is active).
func LeaveStreamed(ctx context.Context, peek *pgx.Conn, tx pgx.Tx, p Peek, keys map[string][]string) (map[string]int64, error) {
	if err := waitFlushed(ctx, peek, p.Upto); err != nil {
		return nil, err
	}
	rows, err := peek.Query(ctx, `SELECT data FROM pg_logical_slot_peek_binary_changes($1, $2::pg_lsn, NULL,
		'proto_version', '1', 'publication_names', $3)`, p.Slot, p.Upto.String(), pgx.Identifier{p.Publication}.Sanitize())
	if err != nil {
		return nil, peekError(p.Slot, err)
	}
	defer rows.Close()
	src := &peekSource{slot: p.Slot, rows: rows, keys: newInsertKeys(keys), counts: map[string]int64{}}
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{streamedTable}, []string{"tbl", "k"}, src); err != nil {
		if src.err != nil {
			return nil, src.err
		}
		return nil, fmt.Errorf("record the rows slot %s will stream: %w", p.Slot, err)
	}
	if src.err != nil {
		return nil, src.err
	}
	return src.counts, nil
}

// waitFlushed waits until PostgreSQL has flushed WAL up to upto (with synchronous_commit off, a commit is
// visible before its record is flushed; the walwriter flushes it within a few wal_writer_delay).
func waitFlushed(ctx context.Context, conn *pgx.Conn, upto cdc.LSN) error {
	for {
		var done bool
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn() >= $1::pg_lsn`, upto.String()).Scan(&done); err != nil {
			return fmt.Errorf("read PostgreSQL's flushed WAL position: %w", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// peekError names the slot in a failed peek; a slot another process streams is said so.
func peekError(slot string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55006" {
		return fmt.Errorf("read what slot %s will stream: it is in use by another process: %w", slot, err)
	}
	return fmt.Errorf("read what slot %s will stream: %w", slot, err)
}

// peekSource is LeaveStreamed's rows for COPY: one (table, key) per insert of a watched table, read as the
// peek's rows arrive.
type peekSource struct {
	slot   string
	rows   pgx.Rows
	keys   *insertKeys
	next   []any
	counts map[string]int64
	err    error
}

func (s *peekSource) Next() bool {
	for s.rows.Next() {
		var data []byte
		if err := s.rows.Scan(&data); err != nil {
			s.err = peekError(s.slot, err)
			return false
		}
		table, key, ok, err := s.keys.parse(data)
		if err != nil {
			s.err = err
			return false
		}
		if ok {
			s.counts[table]++
			s.next = []any{table, key}
			return true
		}
	}
	if err := s.rows.Err(); err != nil {
		s.err = peekError(s.slot, err)
	}
	return false
}

func (s *peekSource) Values() ([]any, error) { return s.next, nil }
func (s *peekSource) Err() error             { return s.err }

// insertKeys reads pgoutput (proto_version 1) messages: Relation messages tell which relation OID is a watched
// table, by namespace and name as the stream's decoder matches them, and where its key columns are; an
// Insert of one gives its key. Every other message is passed over.
type insertKeys struct {
	watched   map[[2]string]watchedTable // by namespace and name
	relations map[uint32]relationKey     // the watched ones, by OID, from the last Relation message of each
}

type watchedTable struct {
	name string   // schema.name, as the temporary table keeps it
	key  []string // StreamKey's columns
}

type relationKey struct {
	table string
	pos   []int // each key column's position in the tuple; -1 for one the relation lacks
}

func newInsertKeys(keys map[string][]string) *insertKeys {
	k := &insertKeys{watched: map[[2]string]watchedTable{}, relations: map[uint32]relationKey{}}
	for table, key := range keys {
		id := migrations.TableIdent(table)
		k.watched[[2]string{id[0], id[1]}] = watchedTable{name: decode.QualifiedTable(table), key: key}
	}
	return k
}

// parse reads one message; ok says that it is an Insert of a watched table whose key has no NULL or
// missing part, of which table and key are then the table and the key's text.
func (k *insertKeys) parse(data []byte) (table string, key []string, ok bool, err error) {
	if len(data) == 0 {
		return "", nil, false, nil
	}
	r := wire{buf: data[1:], ok: true}
	switch data[0] {
	case 'R':
		oid := r.u32()
		ns, name := r.cstring(), r.cstring()
		r.u8() // replica identity
		n := int(r.u16())
		cols := make([]string, 0, n)
		for i := 0; i < n && r.ok; i++ {
			r.u8() // flags
			cols = append(cols, r.cstring())
			r.u32() // type
			r.u32() // typmod
		}
		if !r.ok {
			return "", nil, false, errors.New("read what the slot will stream: a truncated Relation message")
		}
		w, watched := k.watched[[2]string{ns, name}]
		if !watched {
			delete(k.relations, oid)
			return "", nil, false, nil
		}
		rk := relationKey{table: w.name, pos: make([]int, len(w.key))}
		for i, c := range w.key {
			rk.pos[i] = -1
			for j, col := range cols {
				if col == c {
					rk.pos[i] = j
				}
			}
		}
		k.relations[oid] = rk
	case 'I':
		rk, watched := k.relations[r.u32()]
		if !watched || r.u8() != 'N' {
			return "", nil, false, nil
		}
		values := r.tuple()
		if !r.ok {
			return "", nil, false, errors.New("read what the slot will stream: a truncated Insert message")
		}
		key = make([]string, len(rk.pos))
		for i, p := range rk.pos {
			if p < 0 || p >= len(values) || values[p] == nil {
				return "", nil, false, nil // the copy's key has no such part to match: the row is copied
			}
			key[i] = *values[p]
		}
		return rk.table, key, true, nil
	}
	return "", nil, false, nil
}

// wire reads pgoutput's fields; a short read clears ok and every later read returns zero values.
type wire struct {
	buf []byte
	ok  bool
}

func (w *wire) take(n int) []byte {
	if !w.ok || n < 0 || n > len(w.buf) {
		w.ok, w.buf = false, nil
		return nil
	}
	b := w.buf[:n]
	w.buf = w.buf[n:]
	return b
}

func (w *wire) u8() byte {
	if b := w.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (w *wire) u16() uint16 {
	if b := w.take(2); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (w *wire) u32() uint32 {
	if b := w.take(4); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (w *wire) cstring() string {
	i := bytes.IndexByte(w.buf, 0)
	if !w.ok || i < 0 {
		w.ok, w.buf = false, nil
		return ""
	}
	s := string(w.buf[:i])
	w.buf = w.buf[i+1:]
	return s
}

// tuple reads a TupleData: each column's text, nil for a NULL or an unchanged TOASTed value.
func (w *wire) tuple() []*string {
	n := int(w.u16())
	out := make([]*string, 0, n)
	for i := 0; i < n && w.ok; i++ {
		switch w.u8() {
		case 't', 'b':
			s := string(w.take(int(w.u32())))
			out = append(out, &s)
		default: // 'n' NULL, 'u' unchanged TOAST
			out = append(out, nil)
		}
	}
	return out
}
