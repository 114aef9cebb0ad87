package pubcheck

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/decode"
)

// TestGapBackfill: the backfill a publication gap recorded before 013 (by time, without transaction ids)
// names works for the table: the native shape's occurred_at, a mapped table's --config and its timestamp
// column, --table for any table but the default, --slot for any slot but the default, and a window widened
// to whole seconds on both sides.
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
		// The default table among several is named too: the backfill refuses to choose among the record's tables.
		{"the default of several", Config{Table: "public.outbox", Decode: decode.Config{MoreTables: []decode.Outbox{{Table: "b"}}}}, "outbox",
			`cdc-router backfill --table public.outbox --where "occurred_at >= `},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := newGap(tc.cfg, tc.table, &from, "", to, "").command(tc.cfg)
			if !strings.Contains(got, tc.want) {
				t.Errorf("backfill %q lacks %q", got, tc.want)
			}
		})
	}
}

// TestGapBackfillByTransaction: a gap with transaction ids selects the rows by their inserting transaction,
// from the oldest transaction running at the check before the gap to one begun after the check that found
// it, in the 32-bit ids a row's xmin holds (their epoch dropped: age() compares them across wraparound),
// or by the window of occurred_at (a row an UPDATE gave a later xmin), the timestamp column of a mapped
// table; a mapped table without one by the transactions alone. Without the first check (before the router
// ever checked the table, or a check recorded before 013): every transaction before the second.
func TestGapBackfillByTransaction(t *testing.T) {
	from := time.Date(2026, 12, 1, 7, 0, 0, 500e6, time.UTC)
	to := time.Date(2026, 12, 1, 7, 0, 4, 200e6, time.UTC)
	untimed := Config{Table: "public.outbox", Decode: decode.Config{Mapping: &decode.Mapping{}}}
	timed := Config{Table: "public.outbox", Decode: decode.Config{Mapping: &decode.Mapping{TimestampColumn: "created_at"}}}
	wrapped := fmt.Sprint(5<<32 + 100)
	const xids = "age(xmin) <= age('730'::xid) AND age(xmin) > age('812'::xid)"
	const window = "occurred_at >= '2026-12-01 07:00:00Z' AND occurred_at < '2026-12-01 07:00:05Z'"
	for _, tc := range []struct {
		name           string
		cfg            Config
		from           *time.Time
		xidFrom, xidTo string
		where, desc    string
	}{
		{"native", Config{Table: "public.outbox"}, &from, "730", "812", "(" + xids + ") OR (" + window + ")", "by transactions 730 to 811"},
		{"mapped with a timestamp column", timed, &from, "730", "812",
			"(" + xids + ") OR (" + strings.ReplaceAll(window, "occurred_at", "created_at") + ")", "by transactions 730 to 811"},
		{"mapped without one", untimed, &from, "730", "812", xids, "by transactions 730 to 811"},
		{"across wraparound, in a later epoch", Config{Table: "public.outbox"}, &from, fmt.Sprint(4<<32 + 4294967000), wrapped,
			"(age(xmin) <= age('4294967000'::xid) AND age(xmin) > age('100'::xid)) OR (" + window + ")", "by transactions 4294967000 to 99"},
		{"no check before", Config{Table: "public.outbox"}, nil, "730", "812",
			"(age(xmin) > age('812'::xid)) OR (occurred_at < '2026-12-01 07:00:05Z')", "by transactions before 812"},
		{"a check before 013", Config{Table: "public.outbox"}, &from, "", "812",
			"(age(xmin) > age('812'::xid)) OR (" + window + ")", "by transactions before 812"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := newGap(tc.cfg, "outbox", tc.from, tc.xidFrom, to, tc.xidTo)
			if g.Where != tc.where || !strings.Contains(g.command(tc.cfg), `--where "`+tc.where+`"`) {
				t.Errorf("where %q, command %q; want %q", g.Where, g.command(tc.cfg), tc.where)
			}
			if d := g.describe(tc.cfg); !strings.Contains(d, "rows inserted then "+tc.desc+" were never streamed") {
				t.Errorf("description %q does not say %q", d, tc.desc)
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
