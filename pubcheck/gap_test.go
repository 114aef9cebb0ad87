package pubcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/decode"
)

// TestGapBackfill: the backfill a publication gap names works for the table: the native shape's
// occurred_at, a mapped table's --config and its timestamp column, --table for any table but the
// default, --slot for any slot but the default, and a window widened to whole seconds on both sides.
func TestGapBackfill(t *testing.T) {
	from := time.Date(2026, 12, 1, 7, 0, 0, 500e6, time.UTC)
	to := time.Date(2026, 12, 1, 7, 0, 4, 200e6, time.UTC)
	mapped := &decode.Mapping{TimestampColumn: "created_at"}
	untimed := &decode.Mapping{}
	window := "'2026-12-01 07:00:00Z' AND %s < '2026-12-01 07:00:05Z'"
	for _, tc := range []struct {
		name  string
		cfg   Config
		table string
		want  string
	}{
		{"native", Config{Table: "public.outbox"}, "outbox",
			`cdc-router backfill --where "occurred_at >= ` + strings.ReplaceAll(window, "%s", "occurred_at") + `"`},
		{"mapped with a timestamp column", Config{Table: "app.events", Decode: decode.Config{Table: "app.events", Mapping: mapped}}, "app.events",
			`cdc-router backfill --table app.events --config <its file> --where "created_at >= ` + strings.ReplaceAll(window, "%s", "created_at") + `"`},
		{"mapped without one", Config{Table: "public.outbox", Decode: decode.Config{Mapping: untimed}}, "public.outbox",
			`--config <its file> --where "<a column that orders its rows> >= `},
		{"another slot", Config{Table: "public.outbox", Slot: "orders_2"}, "outbox",
			`cdc-router backfill --slot orders_2 --where "occurred_at >= `},
		{"the second of several", Config{Table: "public.outbox", Decode: decode.Config{MoreTables: []decode.Outbox{{Table: "b"}}}}, "b",
			`cdc-router backfill --table public.b --where "occurred_at >= `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newGap(tc.cfg, tc.table, &from, to).command(tc.cfg)
			if !strings.Contains(got, tc.want) {
				t.Errorf("backfill %q lacks %q", got, tc.want)
			}
		})
	}
}

// TestChangedTables: a table whose recorded identity differs has changed; one seen for the first time has
// not (a new router, or a schema before the identities were recorded).
func TestChangedTables(t *testing.T) {
	seen := map[string]string{"public.a": "publication 1 row 10 table 2 rel 3", "public.b": "publication 1 row 10 table 4 rel 5"}
	cur := map[string]string{"public.a": "publication 1 row 10 table 2 rel 3", "public.b": "publication 1 row 10 table 4 rel 9",
		"public.c": "publication 1 row 10 table 6 rel 7"}
	got := changedTables(seen, cur, []string{"a", "public.b", "c"}, false)
	if len(got) != 1 || got[0] != "public.b" {
		t.Fatalf("changed = %v, want [public.b]", got)
	}
	if got := changedTables(nil, cur, []string{"a"}, false); len(got) != 0 {
		t.Fatalf("changed without a record = %v, want none", got)
	}
	edited := map[string]string{"public.a": "publication 1 row 11 table 2 rel 3"}
	if got := changedTables(seen, edited, []string{"a"}, false); len(got) != 1 {
		t.Fatalf("changed after the options were edited = %v, want [public.a]", got)
	}
	if got := changedTables(seen, edited, []string{"a"}, true); len(got) != 0 {
		t.Fatalf("changed after a lossless option change = %v, want none", got)
	}
}
