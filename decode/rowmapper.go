package decode

import (
	"fmt"
	"strconv"
	"time"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Column is one column of a mapped outbox table as a reader sees it (pg_attribute, in attnum order):
// its name and its type's OID, and optionally the type's name (format_type) for a type that is not
// built in, to word a refusal.
type Column struct {
	Name     string
	TypeOID  uint32
	TypeName string
}

// RowMapper maps the rows of a mapped outbox table read with SELECT (the snapshot, a backfill, a
// quarantine replay) by the same code as the stream maps its inserts: a row read here and the same row
// streamed become the same event, apart from CommitLSN (the caller sets the read position) and, for a
// mapping without a timestamp column, the time (commitTime here, the commit's time in the stream).
type RowMapper struct {
	cfg   Config
	table string
	cols  []Column
	names []string // the columns' names, in the order of cols
	rel   *mapping.Relation
	tuple []value
}

// MappingError is a table whose columns do not fit its mapping: the same problem, naming the columns
// and the options, that the stream finds in the table's Relation message.
type MappingError struct {
	Table   string // schema.name
	Problem string
}

func (e *MappingError) Error() string {
	schema, name, _ := pgtext.SplitTable(e.Table)
	return fmt.Sprintf("decode: refusing to read %s because %s: correct the option in the --config file to the "+
		"table as it is, or the table (%s) to the option", e.Table, e.Problem, quoteIdent(schema)+"."+quoteIdent(name))
}

// MappingFor returns the mapping cfg gives table (Config.Mapping for Config.Table, else the Outbox of
// Config.MoreTables naming it), or nil for a table of the native shape or one cfg does not name.
func MappingFor(cfg Config, table string) *Mapping {
	cfg = cfg.withDefaults()
	if QualifiedTable(cfg.Table) == QualifiedTable(table) {
		return cfg.Mapping
	}
	for _, t := range cfg.MoreTables {
		if QualifiedTable(t.Table) == QualifiedTable(table) {
			return t.Mapping
		}
	}
	return nil
}

// NewRowMapper resolves table's mapping (MappingFor) against the table's columns, in the order Map's
// values come in. A table without a mapping in cfg is an error; one whose columns do not fit the mapping
// is a *MappingError.
func NewRowMapper(cfg Config, table string, cols []Column) (*RowMapper, error) {
	cfg = cfg.withDefaults()
	mp := MappingFor(cfg, table)
	if mp == nil {
		return nil, fmt.Errorf("decode: table %s has no mapping (--config)", QualifiedTable(table))
	}
	msg := relationMsg{columns: make([]string, len(cols)), types: make([]uint32, len(cols))}
	names := map[uint32]string{}
	for i, c := range cols {
		msg.columns[i], msg.types[i] = c.Name, c.TypeOID
		if c.TypeName != "" {
			names[c.TypeOID] = c.TypeName
		}
	}
	typeName := func(oid uint32) string {
		if n := pgtext.BuiltinTypeName(oid); n != "" {
			return n
		}
		if n, ok := names[oid]; ok {
			return n
		}
		return "type OID " + strconv.FormatUint(uint64(oid), 10)
	}
	rel, problem := mapping.Resolve(mp, msg.columns, msg.types, typeName)
	if problem != "" {
		return nil, &MappingError{Table: QualifiedTable(table), Problem: problem}
	}
	return &RowMapper{cfg: cfg, table: QualifiedTable(table), cols: cols, names: msg.columns, rel: rel,
		tuple: make([]value, len(cols))}, nil
}

// Columns is the table's columns, as NewRowMapper got them.
func (r *RowMapper) Columns() []Column { return r.cols }

// IDColumn is the position of the event id column (table.field.event.id) in Columns.
func (r *RowMapper) IDColumn() int { return r.rel.IDPos() }

// Map maps one row: values are its columns in the order of Columns, as text the way a reader session
// prints them (TimeZone=UTC, DateStyle=ISO, IntervalStyle=postgres, extra_float_digits=3,
// bytea_output=hex; nil for NULL). commitTime stands in for the commit time where the stream would use it
// (no timestamp column, or a NULL one). drop is true for a tombstone with amqp.tombstone=drop. A row that
// cannot become an event returns a *RowError, with the reason the stream would quarantine it for.
func (r *RowMapper) Map(values []*string, commitTime time.Time) (ev cdc.Event, drop bool, err error) {
	if len(values) != len(r.cols) {
		return cdc.Event{}, false, fmt.Errorf("decode: %d values for the %d columns of %s", len(values), len(r.cols), r.table)
	}
	for i, v := range values {
		if v == nil {
			r.tuple[i] = value{Kind: kindNull}
		} else {
			r.tuple[i] = value{Kind: kindText, Data: []byte(*v)}
		}
	}
	ev, drop, rowErr := r.rel.Map(r.cfg.limits(), r.tuple, 0, commitTime)
	if rowErr != nil || drop {
		clear(r.tuple)
		return cdc.Event{}, drop, errorOrNil(rowErr)
	}
	ev.Table = r.table
	ev.Mapped.Columns = r.rel.RowColumns(r.names, r.tuple, ev) // for a quarantine record, as the stream keeps it
	clear(r.tuple)
	return ev, false, nil
}

// errorOrNil keeps a nil *RowError from becoming a non-nil error.
func errorOrNil(e *RowError) error {
	if e == nil {
		return nil
	}
	return e
}
