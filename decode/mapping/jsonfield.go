package mapping

import (
	"encoding/json"
	"strconv"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
)

// fieldValue is the value of a column:field role: a string (pgtext.OIDText) or an integer (pgtext.OIDInt8), ok false
// for a NULL column or a JSON null.
type fieldValue struct {
	set  bool
	text []byte
	oid  uint32
	ok   bool
}

// resolveFields reads the column:field roles of t's mapping (table.field.event.key, route.by.field and
// table.field.event.type may name a top-level field of a JSON column) into t.fields, so that mappedValue
// returns the field for such a role. A column that is not a JSON object, lacks the field, or holds
// something other than a string or an integer there, quarantines the row, naming the option.
func (t mappedTuple) resolveFields() (mappedTuple, *pgtext.RowError) {
	roles := t.rel.mapping.roles()
	for i, r := range roles {
		if r.field == "" {
			continue
		}
		if t.fields == nil {
			t.fields = make([]fieldValue, len(roles))
		}
		v, _, ok := t.mappedValue(i) // the column itself: its field is not set yet
		t.fields[i].set = true
		if !ok {
			continue // a NULL column: as a NULL value
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(v, &obj); err != nil || obj == nil {
			return t, pgtext.RowErrorf("%s (%s=%s:%s) is not a JSON object", r.column, r.option, r.column, r.field)
		}
		raw, found := obj[r.field]
		if !found {
			return t, pgtext.RowErrorf("%s (%s=%s:%s) has no field %s", r.column, r.option, r.column, r.field, strconv.Quote(r.field))
		}
		switch {
		case string(raw) == "null":
		case raw[0] == '"':
			var s string
			_ = json.Unmarshal(raw, &s) // valid: Unmarshal checked the object
			t.fields[i] = fieldValue{set: true, text: []byte(s), oid: pgtext.OIDText, ok: true}
		default:
			if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
				return t, pgtext.RowErrorf("%s (%s=%s:%s) holds %s in field %s, not a string or an integer within int64",
					r.column, r.option, r.column, r.field, pgtext.Quote(truncated(raw)), strconv.Quote(r.field))
			}
			t.fields[i] = fieldValue{set: true, text: raw, oid: pgtext.OIDInt8, ok: true}
		}
	}
	return t, nil
}

// truncated is at most the first 64 bytes of b, for a reason that quotes a value.
func truncated(b []byte) []byte {
	if len(b) > 64 {
		return b[:64]
	}
	return b
}
