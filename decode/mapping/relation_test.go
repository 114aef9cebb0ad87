package mapping

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
)

// defaultTable resolves the default mapping against a table with every column it reads, each of its
// first accepted type, and returns the relation with a row of valid values.
func defaultTable(t *testing.T) (*Relation, []pgtext.Value) {
	t.Helper()
	m, err := ParseMapping("")
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	var types []uint32
	var row []pgtext.Value
	for _, r := range m.roles() {
		if r.column == "" || len(r.types) == 0 {
			continue
		}
		cols, types = append(cols, r.column), append(types, r.types[0])
		v := "x"
		switch r.types[0] {
		case pgtext.OIDUUID:
			v = "0b6f2a4e-8f3c-4d2a-9a57-0c1e5d9f7a10"
		case pgtext.OIDJSONB, pgtext.OIDJSON:
			v = `{"a":1}`
		case pgtext.OIDTimestamptz:
			v = "2026-12-02 03:00:00+00"
		case pgtext.OIDInt4, pgtext.OIDInt2, pgtext.OIDInt8:
			v = "1"
		}
		row = append(row, pgtext.Value{Kind: pgtext.KindText, Data: []byte(v)})
	}
	rel, problem := Resolve(m, cols, types, pgtext.BuiltinTypeName)
	if problem != "" {
		t.Fatalf("Resolve: %s", problem)
	}
	return rel, row
}

// A mapped row is refused from its lengths: a column other than the payload over Limits.ValueLimit and
// a payload over Limits.MaxPayloadBytes are RowErrors naming the limit; the same row within them maps.
func TestMapBoundsValues(t *testing.T) {
	rel, row := defaultTable(t)
	lim := Limits{MaxPayloadBytes: 64, ValueLimit: 128}
	if _, _, rowErr := rel.Map(lim, row, 0, time.Now()); rowErr != nil {
		t.Fatalf("a row within the limits: %v", rowErr)
	}
	payload := rel.cols[rolePayload].pos
	for i := range row {
		big := append([]pgtext.Value(nil), row...)
		want := "over the 128-byte limit of a column other than the payload"
		if i == payload {
			big[i].Data = []byte(`{"a":"` + strings.Repeat("x", 100) + `"}`)
			want = "over the 64-byte limit (--max-payload-bytes)"
		} else {
			big[i].Data = []byte(strings.Repeat("7", 200))
		}
		_, _, rowErr := rel.Map(lim, big, 0, time.Now())
		if rowErr == nil || !strings.Contains(rowErr.Reason, want) {
			t.Errorf("column %d over its limit: %v, want a RowError containing %q", i, rowErr, want)
		}
	}
}
