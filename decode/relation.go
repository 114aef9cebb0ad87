package decode

import (
	"strings"
	"unicode/utf8"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// maxEventID bounds Quarantined.EventID, in bytes.
const maxEventID = 255

// relation is the relation cache entry built from a Relation message.
type relation struct {
	table   string   // namespace.name, for Quarantined.Table and DriftError.Table
	columns []string // column names in wire order
	outbox  bool     // the relation is Config.Table or one of Config.MoreTables
	index   [numColumns]int
	// problem is why an insert into this relation is drift ("" for an outbox of the expected shape), and
	// fix the DriftError clause naming the fix. A Relation message alone is never an error: the problem
	// is reported at the relation's first insert, if any.
	problem, fix string
	// mapped is the outbox resolved against Config.Mapping; nil for the native shape.
	mapped *mapping.Relation
}

// newRelation builds the cache entry for m; index maps each outbox column to its wire position, or -1
// when m lacks it. Columns are matched by name, so their order and any extra columns do not matter; the
// outbox must have all of them with an accepted type (acceptedTypes), any other relation is drift.
func (d *Decoder) newRelation(m relationMsg) *relation {
	rel := &relation{table: m.namespace + "." + m.name, columns: m.columns}
	mp, outbox := d.outboxes[[2]string{m.namespace, m.name}]
	rel.outbox = outbox
	for c := range rel.index {
		rel.index[c] = -1
	}
	for pos, name := range m.columns {
		if c, ok := columnByName(name); ok && rel.index[c] < 0 {
			rel.index[c] = pos
		}
	}
	quoted := quoteIdent(m.namespace) + "." + quoteIdent(m.name)
	if !rel.outbox {
		rel.problem = "table " + rel.table + " is in the publication but is not " + d.outboxNames()
		quotedOutboxes := make([]string, len(d.names))
		for i, n := range d.names {
			schema, name, _ := pgtext.SplitTable(n)
			quotedOutboxes[i] = quoteIdent(schema) + "." + quoteIdent(name)
		}
		rel.fix = otherFix(rel.table, quoted, strings.Join(quotedOutboxes, ", "), d.cfg.Publication)
		return rel
	}
	if mp != nil {
		rel.mapped, rel.problem = mapping.Resolve(mp, m.columns, m.types, d.typeName)
		for c := range rel.index {
			rel.index[c] = -1
		}
		rel.index[colID] = rel.mapped.IDPos() // for the quarantine record's event id
		if rel.problem != "" {
			rel.fix = mapping.DriftFix(quoted)
		}
		return rel
	}
	var actions []string
	if rel.problem, actions = d.shapeDrift(m, &rel.index); rel.problem != "" {
		rel.fix = shapeFix(quoted, actions)
	}
	return rel
}

// outboxNames names the outbox tables for a DriftError's problem: "the outbox table a" or "one of the
// outbox tables a, b".
func (d *Decoder) outboxNames() string {
	if len(d.names) == 1 {
		return "the outbox table " + d.names[0]
	}
	return "one of the outbox tables " + strings.Join(d.names, ", ")
}

// rawColumns is the tuple as Quarantined.Columns: a bounded cdc.RawValue by column name (NullValue for
// NULL), no entry for an unchanged TOASTed value. It copies at most cdc.MaxStoredValue bytes of a value.
func rawColumns(names []string, tuple []value) map[string]cdc.RawValue {
	m := make(map[string]cdc.RawValue, len(tuple))
	for i, v := range tuple {
		switch v.Kind {
		case kindNull:
			m[names[i]] = cdc.NullValue()
		case kindText:
			m[names[i]] = cdc.NewRawValue(v.Data)
		}
	}
	return m
}

// eventID is the text of rel's id column in tuple, cut to maxEventID bytes at a UTF-8 sequence boundary,
// or "" when the relation has no id column or the value is not text.
func eventID(rel *relation, tuple []value) string {
	pos := rel.index[colID]
	if pos < 0 || tuple[pos].Kind != kindText {
		return ""
	}
	id := tuple[pos].Data
	if rel.mapped != nil {
		id = []byte(rel.mapped.EventID(id)) // the message id: bytea in hex without \x
	}
	return string(cutUTF8(id, maxEventID))
}

// cutUTF8 cuts b to at most n bytes without leaving a partial UTF-8 sequence at the end.
func cutUTF8(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	b = b[:n]
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return b
}
