package decode

// relation is the relation cache entry built from a Relation message.
type relation struct {
	table   string   // namespace.name, for Quarantined.Table
	columns []string // column names in wire order
	outbox  bool     // the relation is Config.Table
	index   [numColumns]int
}

// newRelation builds the cache entry for m; index maps each outbox column to its wire position, or -1
// when m lacks it. Columns are matched by name, so their order and any extra columns do not matter.
func newRelation(m relationMsg, schema, table string) *relation {
	rel := &relation{
		table:   m.namespace + "." + m.name,
		columns: m.columns,
		outbox:  m.namespace == schema && m.name == table,
	}
	for c := range rel.index {
		rel.index[c] = -1
	}
	for pos, name := range m.columns {
		if c, ok := columnByName(name); ok && rel.index[c] < 0 {
			rel.index[c] = pos
		}
	}
	return rel
}

// rawColumns is the tuple as Quarantined.Columns: text by column name, nil for NULL, no entry for an
// unchanged TOASTed value.
func rawColumns(names []string, tuple []value) map[string]*string {
	m := make(map[string]*string, len(tuple))
	for i, v := range tuple {
		switch v.kind {
		case kindNull:
			m[names[i]] = nil
		case kindText:
			s := string(v.data)
			m[names[i]] = &s
		}
	}
	return m
}
