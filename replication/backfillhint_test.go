package replication

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/decode"
)

// TestBackfillHint: the hint after a publication gap names a backfill that works for the table: the
// native shape's occurred_at, a mapped table's --config and its timestamp column, the table to pick when
// there are several.
func TestBackfillHint(t *testing.T) {
	at := time.Date(2026, 12, 1, 7, 0, 0, 0, time.UTC)
	mapped := &decode.Mapping{TimestampColumn: "created_at"}
	untimed := &decode.Mapping{}
	for _, tc := range []struct {
		name string
		cfg  decode.Config
		want []string
		not  []string
	}{
		{"native", decode.Config{}, []string{`backfill --where "occurred_at >= '2026-12-01 07:00:00Z'"`}, []string{"--config", "--table"}},
		{"mapped with a timestamp column", decode.Config{Mapping: mapped},
			[]string{`backfill --config <its file> --where "created_at >= '2026-12-01 07:00:00Z'"`}, []string{"occurred_at"}},
		{"mapped without one", decode.Config{Mapping: untimed},
			[]string{`--config <its file> --where "<a column that orders its rows> >= `}, []string{"occurred_at"}},
		{"several tables, one mapped", decode.Config{MoreTables: []decode.Outbox{{Table: "b", Mapping: mapped}}},
			[]string{"--table <that table> (and --config <its file> if it is a mapped table)"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := backfillHint(Config{Decode: tc.cfg}, &at)
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("hint %q lacks %q", got, w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(got, n) {
					t.Errorf("hint %q has %q", got, n)
				}
			}
		})
	}
}
