package mapping

import (
	"fmt"
	"slices"
	"strings"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
)

// mappedRole is one column a Mapping reads: the option naming it, the types it accepts (nil: any),
// whether a table without it is refused, and whether the option was left at its default for an optional
// column (ifTyped): a column of that name and another type is then the table's own, left unused.
type mappedRole struct {
	option, column string
	types          []uint32
	required       bool
	ifTyped        bool
	field          string // column:field: the role's value is this top-level field of the JSON column
}

var (
	keyTypes     = []uint32{pgtext.OIDUUID, pgtext.OIDText, pgtext.OIDVarchar, pgtext.OIDInt8, pgtext.OIDInt4, pgtext.OIDInt2}
	idTypes      = append(keyTypes[:len(keyTypes):len(keyTypes)], pgtext.OIDBytea) // id and key: bytea too
	payloadTypes = []uint32{pgtext.OIDJSONB, pgtext.OIDJSON, pgtext.OIDText, pgtext.OIDVarchar, pgtext.OIDBytea}
	// jsonFieldTypes are the types of a column whose field an option names (column:field).
	jsonFieldTypes = []uint32{pgtext.OIDJSONB, pgtext.OIDJSON, pgtext.OIDText, pgtext.OIDVarchar}
)

// Role indexes in Relation.cols; additional placements follow numRoles, then the property columns.
const (
	roleID = iota
	roleKey
	rolePayload
	roleRoute
	roleTimestamp
	roleType
	roleSchemaVersion
	roleTracing
	numRoles
)

// roles lists the columns m reads, roles first (an unused role has an empty column), then the placements.
func (m *Mapping) roles() []mappedRole {
	r := []mappedRole{
		{"table.field.event.id", m.IDColumn, idTypes, true, false, ""},
		{"table.field.event.key", m.KeyColumn, idTypes, true, false, ""},
		{"table.field.event.payload", m.PayloadColumn, payloadTypes, true, false, ""},
		{"route.by.field", m.RouteColumn, keyTypes, true, false, ""},
		{"table.field.event.timestamp", m.TimestampColumn, []uint32{pgtext.OIDTimestamptz, pgtext.OIDTimestamp, pgtext.OIDInt8}, true, false, ""},
		{"table.field.event.type", m.TypeColumn, []uint32{pgtext.OIDText, pgtext.OIDVarchar}, false, !m.typeSet, ""},
		{"table.field.event.schema.version", m.SchemaVersionColumn, []uint32{pgtext.OIDInt4, pgtext.OIDInt2}, true, false, ""},
		{"tracing.span.context.field", m.TracingColumn, []uint32{pgtext.OIDText, pgtext.OIDVarchar}, m.tracingSet, !m.tracingSet, ""},
	}
	for i := range r {
		if f := m.fields[r[i].option]; f != "" {
			r[i].field, r[i].types = f, jsonFieldTypes
		}
	}
	for _, p := range m.Additional {
		r = append(r, mappedRole{"table.fields.additional.placement", p.Column, nil, m.AdditionalMissing == "error", false, ""})
	}
	for _, p := range m.Properties { // after the placements: roles numRoles+len(m.Additional)+i
		r = append(r, mappedRole{"amqp.property." + p.Name, p.Column, propertyTypes, true, false, ""})
	}
	// Last, whether set or not: role m.headersRole().
	r = append(r, mappedRole{"amqp.headers.json", m.HeadersJSONColumn, []uint32{pgtext.OIDJSONB, pgtext.OIDJSON, pgtext.OIDText, pgtext.OIDVarchar}, true, false, ""})
	return r
}

// ColumnRule is one column a mapping reads, for the setup check: the column, the option that names it,
// the pg_type names it may have (empty: any) and whether the table must have it. IfTyped is set for an
// option left at its default: a column of that name and another type is not refused but left unused (the
// check says so on a start-up line, Unused).
type ColumnRule struct {
	Column, Option string
	Types          []string
	Required       bool
	IfTyped        bool
}

// Unused is the start-up line for a column of rule r's name whose type (typ) r does not read: r's option
// is at its default, so the column is not the mapping's and is left unused.
func (r ColumnRule) Unused(table, typ string) string {
	return fmt.Sprintf("column %s of %s is %s, not %s, so %s (unset, default %s) is not used: events carry no value "+
		"from it; set %s= to say so, or name a column of type %s", r.Column, table, typ, strings.Join(r.Types, " or "),
		r.Option, r.Column, r.Option, strings.Join(r.Types, " or "))
}

// Columns lists the columns m reads, for the setup check (migrations), in the order the decoder checks them.
func (m *Mapping) Columns() []ColumnRule {
	var out []ColumnRule
	for _, r := range m.roles() {
		if r.column == "" {
			continue
		}
		names := make([]string, len(r.types))
		for i, oid := range r.types {
			names[i] = pgtext.BuiltinTypeName(oid)
		}
		out = append(out, ColumnRule{Column: r.column, Option: r.option, Types: names, Required: r.required, IfTyped: r.ifTyped})
	}
	return out
}

// mappedColumn is where a mapped column is in a relation and its type; pos is -1 when absent (allowed).
type mappedColumn struct {
	pos int
	oid uint32
}

// Relation is a table resolved against a Mapping: one mappedColumn per role, then per placement.
type Relation struct {
	mapping *Mapping // the table's mapping
	cols    []mappedColumn
}

// Resolve resolves the Mapping's columns in a Relation message (or, for a row read with SELECT, the
// table's columns: decode.RowMapper) once. problem is "" when every required column is present with an accepted
// type; otherwise it names the columns and the options, their types named by typeName.
func Resolve(mapping *Mapping, columns []string, types []uint32, typeName func(uint32) string) (*Relation, string) {
	roles := mapping.roles()
	rel := &Relation{mapping: mapping, cols: make([]mappedColumn, len(roles))}
	var problems []string
	for i, r := range roles {
		rel.cols[i] = mappedColumn{pos: -1}
		if r.column == "" {
			continue
		}
		pos := slices.Index(columns, r.column)
		if pos < 0 {
			if r.required {
				problems = append(problems, fmt.Sprintf("column %s (%s) is missing%s", r.column, r.option, CaseHint(r.column, r.option, columns)))
			}
			continue
		}
		got := types[pos]
		if r.types != nil && !slices.Contains(r.types, got) {
			if r.ifTyped {
				continue // the table's own column of that name: the option, at its default, is unused
			}
			names := make([]string, len(r.types))
			for j, oid := range r.types {
				names[j] = pgtext.BuiltinTypeName(oid)
			}
			problems = append(problems, fmt.Sprintf("column %s (%s) is %s, want %s", r.column, r.option, typeName(got), pgtext.OrList(names)))
			continue
		}
		rel.cols[i] = mappedColumn{pos: pos, oid: got}
	}
	return rel, strings.Join(problems, "; ")
}

// DriftFix is the fix clause of a DriftError for a table that does not fit the mapping.
func DriftFix(table string) string {
	return fmt.Sprintf("correct the option in the --config file to the table as it now is and restart (the rows "+
		"written meanwhile are then published), or restore the column of %s and start once with --on-drift=quarantine "+
		"to quarantine the rows written meanwhile, which PostgreSQL decodes with the table definition of their time", table)
}

// CaseHint is the hint for a column an option names that the table lacks, when the table has one whose
// name differs only in case (PostgreSQL folds unquoted names to lower case, and a quoted "MessageId" keeps
// its case): " (the table has a column MessageId: names are case-sensitive; write option=MessageId)", or "".
func CaseHint(column, option string, columns []string) string {
	for _, c := range columns {
		if c != column && strings.EqualFold(c, column) {
			return fmt.Sprintf(" (the table has a column %s: names are case-sensitive; write %s=%s)", c, option, c)
		}
	}
	return ""
}
