package pgtext

import (
	"fmt"
	"strings"
)

// Type OIDs of the built-in types an outbox column may have; built-in OIDs are the same in every cluster.
const (
	OIDBool        = 16
	OIDBytea       = 17
	OIDInt8        = 20
	OIDInt2        = 21
	OIDInt4        = 23
	OIDText        = 25
	OIDJSON        = 114
	OIDVarchar     = 1043
	OIDFloat4      = 700
	OIDFloat8      = 701
	OIDTimestamp   = 1114
	OIDTimestamptz = 1184
	OIDUUID        = 2950
	OIDJSONB       = 3802
)

// BuiltinTypeName names a built-in type OID ("" for another).
func BuiltinTypeName(oid uint32) string {
	names := map[uint32]string{OIDBool: "bool", OIDBytea: "bytea", 18: "char", 19: "name", OIDInt8: "int8", OIDInt2: "int2",
		OIDInt4: "int4", OIDText: "text", 26: "oid", OIDJSON: "json", 142: "xml", OIDFloat4: "float4", OIDFloat8: "float8",
		1042: "bpchar", OIDVarchar: "varchar", 1082: "date", 1083: "time", OIDTimestamp: "timestamp",
		OIDTimestamptz: "timestamptz", 1186: "interval", 1266: "timetz", 1700: "numeric", OIDUUID: "uuid",
		OIDJSONB: "jsonb"}
	return names[oid]
}

// TupleData column kinds.
const (
	KindNull      = 'n' // SQL NULL
	KindUnchanged = 'u' // unchanged TOASTed value, not sent: the value is absent
	KindText      = 't'
	KindBinary    = 'b'
)

// Value is one TupleData column. Data aliases the WAL buffer and is valid only during one Decode call.
type Value struct {
	Kind byte
	Data []byte
}

// RowError is why an outbox row cannot become an event. The row is quarantined, never dropped.
type RowError struct {
	// Reason is one short sentence naming the column and the problem, e.g.
	// `aggregate_version "abc" is not an integer`; for a Config.Check failure it is the error's text.
	Reason string
	check  error // the Config.Check error, when that is the reason
}

func (e *RowError) Error() string { return "outbox row rejected: " + e.Reason }

// Unwrap returns the Config.Check error that rejected the row, or nil.
func (e *RowError) Unwrap() error { return e.check }

// RowErrorf is a RowError with the reason format gives.
func RowErrorf(format string, args ...any) *RowError {
	return &RowError{Reason: fmt.Sprintf(format, args...)}
}

// CheckFailed is the RowError of a row that decode.Config.Check refused with err.
func CheckFailed(err error) *RowError { return &RowError{Reason: err.Error(), check: err} }

// OrList joins s as "a, b or c".
func OrList(s []string) string {
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}

// SplitTable splits "schema.table" at the first dot; a name without one is in public. ok is false when
// either part is empty.
func SplitTable(t string) (schema, name string, ok bool) {
	schema, name, ok = strings.Cut(t, ".")
	if !ok {
		schema, name = "public", t // an unqualified name is in public, as migrations and the checks take it
	}
	return schema, name, schema != "" && name != ""
}

// QualifiedTable is table as schema.name ("public." added to a name without a schema).
func QualifiedTable(table string) string {
	schema, name, _ := SplitTable(table)
	return schema + "." + name
}
