package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/offsets"
)

// mappedTable is an outbox table of another shape (--config) as the copy reads it: every column as text
// in attnum order, mapped by decode.RowMapper (the stream's code), paged by its primary key or, absent
// one, a unique index on NOT NULL columns. Such a key has no NULL part, so there is no NULL-key pass.
type mappedTable struct {
	table  string // schema.name
	cols   []decode.Column
	key    []keyColumn // the key's columns, in index order
	keyPos []int       // position of each key column in cols
	mapper *decode.RowMapper
}

// mapping is the mapping of cfg.Table in cfg.Decode, nil for the native shape.
func (c Config) mapping() *decode.Mapping { return decode.MappingFor(c.Decode, c.Table) }

// ErrNoKey is wrapped by the refusal of a mapped table without a primary key or a unique index on NOT NULL
// columns, which the copy could not page through without skipping or repeating rows.
var ErrNoKey = errors.New("no key to page by")

// readMappedTable reads the columns and the key of cfg.Table through q and resolves its mapping against
// them: a table that does not fit the mapping is a *decode.MappingError, one without a key wraps ErrNoKey.
func readMappedTable(ctx context.Context, cfg Config, q Querier) (*mappedTable, error) {
	mt, err := readMappedColumns(ctx, cfg, q)
	if err != nil {
		return nil, err
	}
	return mt, mt.readKey(ctx, cfg, q)
}

// readMappedColumns reads the columns of cfg.Table and resolves its mapping against them.
func readMappedColumns(ctx context.Context, cfg Config, q Querier) (*mappedTable, error) {
	ident := migrations.TableIdent(cfg.Table).Sanitize()
	mt := &mappedTable{table: decode.QualifiedTable(cfg.Table)}
	rows, err := q.Query(ctx, `SELECT a.attname::text, a.atttypid::int8, format_type(a.atttypid, a.atttypmod)
		FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped
		ORDER BY a.attnum`, ident)
	if err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", cfg.Table, err)
	}
	for rows.Next() {
		var c decode.Column
		var oid int64
		if err := rows.Scan(&c.Name, &oid, &c.TypeName); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the columns of %s: %w", cfg.Table, err)
		}
		c.TypeOID = uint32(oid)
		mt.cols = append(mt.cols, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the columns of %s: %w", cfg.Table, err)
	}
	if len(mt.cols) == 0 {
		return nil, fmt.Errorf("table %s does not exist (or has no columns): correct --table, or the table= line of its --config file", mt.table)
	}
	if mt.mapper, err = decode.NewRowMapper(cfg.Decode, cfg.Table, mt.cols); err != nil {
		return nil, err
	}
	return mt, nil
}

// readKey reads the key the copy pages by: the primary key, else the unique index on NOT NULL columns with
// the fewest columns.
func (mt *mappedTable) readKey(ctx context.Context, cfg Config, q Querier) error {
	ident := migrations.TableIdent(cfg.Table).Sanitize()
	var names, types []string
	err := q.QueryRow(ctx, `SELECT array_agg(a.attname::text ORDER BY k.ord), array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.ord)
		FROM pg_index i CROSS JOIN LATERAL unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indisvalid AND i.indpred IS NULL
		  AND i.indexprs IS NULL AND k.ord <= i.indnkeyatts
		GROUP BY i.indexrelid, i.indisprimary
		HAVING bool_and(a.attnotnull)
		ORDER BY i.indisprimary DESC, count(*), i.indexrelid LIMIT 1`, ident).Scan(&names, &types)
	if errors.Is(err, pgx.ErrNoRows) {
		id := decode.MappingFor(cfg.Decode, cfg.Table).IDColumn
		return fmt.Errorf("%w: table %s has no primary key, nor a unique index on NOT NULL columns, which the snapshot "+
			"and backfill of a mapped table page through in order: add a primary key (ALTER TABLE %s ADD PRIMARY KEY (%s)), or "+
			"run with --snapshot never and leave the rows already in the table to the publisher that wrote them",
			ErrNoKey, mt.table, ident, pgx.Identifier{id}.Sanitize())
	}
	if err != nil {
		return fmt.Errorf("read the primary key of %s: %w", cfg.Table, err)
	}
	for i, n := range names {
		mt.key = append(mt.key, keyColumn{name: n, typ: types[i]})
		for pos, c := range mt.cols {
			if c.Name == n {
				mt.keyPos = append(mt.keyPos, pos)
			}
		}
	}
	return nil
}

// selectList is every column as text, qualified with the alias o.
func (mt *mappedTable) selectList() string {
	parts := make([]string, len(mt.cols))
	for i, c := range mt.cols {
		parts[i] = "o." + pgx.Identifier{c.Name}.Sanitize() + "::text"
	}
	return strings.Join(parts, ", ")
}

func (mt *mappedTable) keyRefs() string {
	parts := make([]string, len(mt.key))
	for i, c := range mt.key {
		parts[i] = "o." + pgx.Identifier{c.name}.Sanitize()
	}
	return strings.Join(parts, ", ")
}

// resumable reports whether k is a key of this table's form: a key stored in the native form, or for
// another key (the table's primary key changed), is not, and the copy then starts over, publishing the
// rows again rather than skipping any.
func (mt *mappedTable) resumable(k *Key) bool { return k != nil && len(k.PrimaryKey) == len(mt.key) }

// after is the predicate for the rows after k in key order, and its arguments (each value cast back from
// its text to the column's type, so that the comparison is the index's).
func (mt *mappedTable) after(k *Key) (string, []any) {
	params := make([]string, len(mt.key))
	args := make([]any, len(mt.key))
	for i, c := range mt.key {
		params[i], args[i] = fmt.Sprintf("$%d::text::%s", i+1, c.typ), k.PrimaryKey[i]
	}
	return "(" + mt.keyRefs() + ") > (" + strings.Join(params, ", ") + ")", args
}

// pageQuery reads the next page of a mapped table in key order.
func (mt *mappedTable) pageQuery(cfg Config, after *Key) (string, []any) {
	q := "SELECT " + mt.selectList() + cfg.from()
	var args []any
	if mt.resumable(after) {
		var pred string
		pred, args = mt.after(after)
		q += " AND " + pred
	}
	return q + " ORDER BY " + mt.keyRefs() + fmt.Sprintf(" LIMIT %d", cfg.PageSize), args
}

// count counts the rows of a mapped table after k.
func (mt *mappedTable) count(ctx context.Context, cfg Config, q Querier, after *Key) (int64, error) {
	sql := "SELECT count(*)" + cfg.from()
	var args []any
	if mt.resumable(after) {
		var pred string
		pred, args = mt.after(after)
		sql += " AND " + pred
	}
	var n int64
	if err := q.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, explainQuery(err, cfg)
	}
	return n, nil
}

// keyOf is the key of a row read by pageQuery.
func (mt *mappedTable) keyOf(raw []*string) Key {
	k := Key{PrimaryKey: make([]string, len(mt.keyPos))}
	for i, p := range mt.keyPos {
		k.PrimaryKey[i] = deref(raw[p])
	}
	return k
}

// primaryRowKey is the quarantine row key of a mapped table's row: its key values as a JSON array of their text.
func (k Key) primaryRowKey() string {
	b, _ := json.Marshal(k.PrimaryKey)
	return string(b)
}

// emitMapped maps one row of a mapped table with the stream's code and publishes it, or quarantines it
// with the table's own column names; a tombstone dropped by amqp.tombstone=drop counts as done. A mapping
// without a timestamp column stamps the row with the time it is read: its commit time is not known.
func (c *copier) emitMapped(ctx context.Context, page offsets.Txn, raw []*string) (Key, error) {
	key := c.mapped.keyOf(raw)
	ev, drop, err := c.mapped.mapper.Map(raw, time.Now())
	var rowErr *decode.RowError
	switch {
	case errors.As(err, &rowErr):
		return key, c.quarantine(ctx, c.mappedRecord(raw, key, rowErr.Reason))
	case err != nil:
		return key, err
	case drop:
		return key, nil
	}
	return key, c.publish(ctx, page, ev, func(reason string) cdc.Quarantined { return c.mappedRecord(raw, key, reason) })
}

// mappedRecord is the quarantine record of a mapped table's row: every column by its own name, the
// table's name, the row's key values as its row key.
func (c *copier) mappedRecord(raw []*string, key Key, reason string) cdc.Quarantined {
	cols := make(map[string]cdc.RawValue, len(raw))
	for i, col := range c.mapped.cols {
		if raw[i] == nil {
			cols[col.Name] = cdc.NullValue()
		} else {
			cols[col.Name] = cdc.TextValue(*raw[i])
		}
	}
	var id string
	if p := c.mapped.mapper.IDColumn(); p >= 0 {
		id = deref(raw[p])
	}
	return cdc.Quarantined{LSN: c.job.ReadLSN, CommitLSN: c.job.ReadLSN, RowKey: key.primaryRowKey(), Table: c.mapped.table,
		EventID: id, Columns: cols, Reason: reason}
}

// CheckTable refuses, before anything is recorded, a table that the copy could not read: for a mapped
// table (cfg.Decode's mapping of cfg.Table), one without a key to page by (wrapping ErrNoKey) or one whose
// columns do not fit the mapping (*decode.MappingError); for the native shape, a table that lacks the
// aggregate columns it pages by (most likely a table that run reads with --config, given without it). The
// rest of the native shape is the setup check's.
func CheckTable(ctx context.Context, cfg Config, q Querier) error {
	cfg = cfg.withDefaults()
	if cfg.mapping() != nil {
		_, err := readMappedTable(ctx, cfg, q)
		return err
	}
	var missing []string
	err := q.QueryRow(ctx, `SELECT coalesce(array_agg(c ORDER BY o), '{}') FROM unnest($2::text[]) WITH ORDINALITY AS k(c, o)
		WHERE to_regclass($1) IS NOT NULL AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = to_regclass($1)
		  AND a.attname = k.c AND a.attnum > 0 AND NOT a.attisdropped)`,
		migrations.TableIdent(cfg.Table).Sanitize(), []string{"aggregate_type", "aggregate_id", "aggregate_version"}).Scan(&missing)
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", cfg.Table, err)
	}
	if len(missing) > 0 {
		return fmt.Errorf("table %s has no column %s, so it is not in the native outbox shape: if run reads it with "+
			"--config, give that file here too (--config FILE); otherwise correct --table", decode.QualifiedTable(cfg.Table),
			strings.Join(missing, ", "))
	}
	return nil
}

// ReadMappedRow reads the row of a mapped table (cfg.Decode's mapping of cfg.Table) whose event id column
// (table.field.event.id) is id, as column text in the order of the returned mapper's Columns (nil for
// NULL), for a quarantine replay; ok is false when there is none (or id is empty). q must be a reader's
// connection (pgserver.ConnectReader). A table that does not fit its mapping is a *decode.MappingError.
func ReadMappedRow(ctx context.Context, q Querier, cfg Config, id string) (mapper *decode.RowMapper, values []*string, ok bool, err error) {
	cfg = cfg.withDefaults()
	mt, err := readMappedColumns(ctx, cfg, q)
	if err != nil {
		return nil, nil, false, err
	}
	pos := mt.mapper.IDColumn()
	if id == "" || pos < 0 {
		return mt.mapper, nil, false, nil
	}
	values = make([]*string, len(mt.cols))
	dest := make([]any, len(values))
	for i := range values {
		dest[i] = &values[i]
	}
	col := mt.cols[pos]
	err = q.QueryRow(ctx, "SELECT "+mt.selectList()+" FROM "+migrations.TableIdent(cfg.Table).Sanitize()+" AS o WHERE o."+
		pgx.Identifier{col.Name}.Sanitize()+" = $1::text::"+col.TypeName+" LIMIT 1", id).Scan(dest...)
	var pgErr *pgconn.PgError
	if errors.Is(err, pgx.ErrNoRows) || errors.As(err, &pgErr) && pgErr.Code[:2] == "22" { // no row, or an id of another type
		return mt.mapper, nil, false, nil
	}
	if err != nil {
		return nil, nil, false, fmt.Errorf("read %s: %w", mt.table, err)
	}
	return mt.mapper, values, true, nil
}
