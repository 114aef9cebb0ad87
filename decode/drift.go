package decode

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// DriftError is an insert Decode refuses because the outbox table or the publication changed under the
// stream: an outbox column is missing or has a type outside the accepted set, or the inserted relation
// is not the outbox. It is returned (with Config.OnDrift = OnDriftRefuse) before the Handler sees
// anything of the row, so a caller that acknowledges only completed transactions keeps the slot before
// it and nothing is lost. Error() is one sentence naming the fix.
type DriftError struct {
	Table   string  // the inserted relation, schema.name as its Relation message names it
	Outbox  string  // the configured outbox table, schema.name
	LSN     cdc.LSN // WAL start of the refused insert, the first affected one
	Problem string  // what drifted, e.g. "column headers is missing"
	fix     string  // the clause that names the fix
}

func (e *DriftError) Error() string {
	return fmt.Sprintf("decode: refusing the insert at %s into %s because %s: %s", e.LSN, e.Table, e.Problem, e.fix)
}

// Type OIDs of the built-in types an outbox column may have (pgtext's).
const (
	oidInt8        = pgtext.OIDInt8
	oidInt2        = pgtext.OIDInt2
	oidInt4        = pgtext.OIDInt4
	oidText        = pgtext.OIDText
	oidJSON        = pgtext.OIDJSON
	oidVarchar     = pgtext.OIDVarchar
	oidTimestamptz = pgtext.OIDTimestamptz
	oidUUID        = pgtext.OIDUUID
	oidJSONB       = pgtext.OIDJSONB
)

// acceptedTypes is the type OIDs the row mapping reads for outbox column c; the first is the one
// migrations/sql/002_outbox.sql creates. It matches the setup check in migrations.
func acceptedTypes(c int) []uint32 {
	switch c {
	case colID:
		return []uint32{oidUUID}
	case colAggregateType, colAggregateID, colEventType:
		return []uint32{oidText, oidVarchar}
	case colAggregateVersion:
		return []uint32{oidInt8, oidInt4, oidInt2}
	case colSchemaVersion:
		return []uint32{oidInt4, oidInt2}
	case colPayload, colHeaders:
		return []uint32{oidJSONB, oidJSON}
	case colOccurredAt:
		return []uint32{oidTimestamptz}
	}
	return nil
}

// typeName names a type OID: a built-in's name, a name a Type message announced, or "type OID n".
func (d *Decoder) typeName(oid uint32) string {
	if n := pgtext.BuiltinTypeName(oid); n != "" {
		return n
	}
	if n, ok := d.types[oid]; ok {
		return n
	}
	return "type OID " + strconv.FormatUint(uint64(oid), 10)
}

// shapeDrift checks an outbox Relation: every outbox column present with an accepted type. It returns
// the problems in column order ("" when none) and the ALTER TABLE actions that restore the shape.
func (d *Decoder) shapeDrift(m relationMsg, index *[numColumns]int) (problem string, actions []string) {
	var problems []string
	for c := range numColumns {
		want := acceptedTypes(c)
		if index[c] < 0 {
			problems = append(problems, fmt.Sprintf("column %s is missing", columnName(c)))
			actions = append(actions, "ADD COLUMN "+columnName(c)+" "+columnDefinition(c))
			continue
		}
		got := m.types[index[c]]
		if slices.Contains(want, got) {
			continue
		}
		names := make([]string, len(want))
		for i, oid := range want {
			names[i] = pgtext.BuiltinTypeName(oid)
		}
		problems = append(problems, fmt.Sprintf("column %s is %s, want %s", columnName(c), d.typeName(got), pgtext.OrList(names)))
		actions = append(actions, fmt.Sprintf("ALTER COLUMN %[1]s TYPE %[2]s USING %[1]s::%[2]s", columnName(c), names[0]))
	}
	return strings.Join(problems, "; "), actions
}

// columnDefinition is the type and constraints ADD COLUMN restores for outbox column c.
func columnDefinition(c int) string {
	switch c {
	case colSchemaVersion:
		return "int4 NOT NULL DEFAULT 1"
	case colHeaders:
		return "jsonb NOT NULL DEFAULT '{}'"
	case colOccurredAt:
		return "timestamptz NOT NULL DEFAULT now()"
	}
	return pgtext.BuiltinTypeName(acceptedTypes(c)[0])
}

// shapeFix is the fix clause of a DriftError for an outbox that lacks columns or has retyped ones.
func shapeFix(table string, actions []string) string {
	what := "the column"
	if len(actions) > 1 {
		what = "the columns"
	}
	return fmt.Sprintf("restore %s (ALTER TABLE %s %s), then start once with --on-drift=quarantine to quarantine "+
		"the rows written meanwhile, which PostgreSQL decodes with the table definition of their time",
		what, table, strings.Join(actions, ", "))
}

// otherFix is the fix clause of a DriftError for an insert into a relation that is not the outbox; outbox
// is the quoted outbox table, or the outbox tables joined with ", ".
func otherFix(table, quoted, outbox, publication string) string {
	pub := "<publication>"
	if publication != "" {
		pub = quoteIdent(publication)
	}
	renamed := "start with --table " + table
	if strings.Contains(outbox, ", ") { // several outbox tables
		renamed = "put " + table + " in its place in --table"
	}
	return fmt.Sprintf("if it is the outbox renamed, %s (or rename it back and start once with "+
		"--on-drift=quarantine to quarantine the rows written meanwhile); if it is a partition of the outbox, "+
		"ALTER PUBLICATION %s SET (publish_via_partition_root = true), start once with --on-drift=quarantine and "+
		"replay the quarantined rows (`cdc-router quarantine replay`); if it is another table, remove it from the "+
		"publication (ALTER PUBLICATION %s DROP TABLE %s, or recreate a FOR ALL TABLES publication as FOR TABLE %s) "+
		"and start once with --on-drift=quarantine", renamed, pub, pub, quoted, outbox)
}

// quoteIdent quotes a name for SQL, always, as pgx.Identifier does: a keyword or an upper-case name needs it.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
