package initial

import (
	"slices"
	"testing"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/snapshot"
)

// twoTables is a router of two outbox tables, the second in another shape.
func twoTables(t *testing.T) Config {
	t.Helper()
	m, err := mapping.ParseMapping("table.field.event.id=uuid\n")
	if err != nil {
		t.Fatal(err)
	}
	return Config{Slot: "s1", Schema: "cdc_router", Table: "public.outbox", SnapshotWhere: "id > 0", SnapshotPageSize: 50,
		Decode: decode.Config{Table: "public.outbox", MaxPayloadBytes: 1 << 20,
			MoreTables: []decode.Outbox{{Table: "billing.events", Mapping: m}}}}
}

// The tables of an initial snapshot are Table first, then MoreTables, as --table gave them, and each is
// its own job named by the slot and (only when there are several) the qualified table: a router of one
// table keeps the name it had before a router could read several, so its unfinished job is found again.
func TestJobNames(t *testing.T) {
	one := Config{Slot: "s1", Table: "outbox"}
	if got := one.outboxTables(); !slices.Equal(got, []string{"outbox"}) {
		t.Errorf("one table: outboxTables = %q", got)
	}
	if got, want := one.initialName("outbox"), snapshot.InitialName("s1"); got != want {
		t.Errorf("one table: initialName = %q, want %q", got, want)
	}
	two := twoTables(t)
	if got := two.outboxTables(); !slices.Equal(got, []string{"public.outbox", "billing.events"}) {
		t.Errorf("two tables: outboxTables = %q", got)
	}
	for _, c := range []struct{ table, want string }{
		{"public.outbox", "initial:s1/public.outbox"},
		{"outbox", "initial:s1/public.outbox"}, // unqualified is public's: the same job
		{"billing.events", "initial:s1/billing.events"},
	} {
		name := two.initialName(c.table)
		if name != c.want {
			t.Errorf("two tables: initialName(%q) = %q, want %q", c.table, name, c.want)
		}
		if !snapshot.IsInitialOf(name, "s1") || snapshot.IsInitialOf(name, "s2") {
			t.Errorf("%q: IsInitialOf s1 %v, s2 %v; want true, false", name, snapshot.IsInitialOf(name, "s1"),
				snapshot.IsInitialOf(name, "s2"))
		}
	}
}

// A table's copy reads that table alone, with its own mapping (nil for the native shape), and carries
// the router's schema, slot, predicate and page size into the snapshot's configuration.
func TestForTable(t *testing.T) {
	cfg := twoTables(t)
	for _, c := range []struct {
		table  string
		mapped bool
	}{{"public.outbox", false}, {"billing.events", true}} {
		one := cfg.forTable(c.table)
		if one.Table != c.table || one.Decode.Table != c.table || len(one.Decode.MoreTables) != 0 {
			t.Errorf("forTable(%q): Table %q, Decode.Table %q, MoreTables %d; want the table alone", c.table,
				one.Table, one.Decode.Table, len(one.Decode.MoreTables))
		}
		if (one.Decode.Mapping != nil) != c.mapped || (c.mapped && one.Decode.Mapping != cfg.Decode.MoreTables[0].Mapping) {
			t.Errorf("forTable(%q): mapping %p, want mapped=%v (the table's own)", c.table, one.Decode.Mapping, c.mapped)
		}
		sc := one.snapshotConfig()
		if sc.Table != c.table || sc.Schema != "cdc_router" || sc.Slot != "s1" || sc.Where != "id > 0" ||
			sc.PageSize != 50 || sc.Decode.MaxPayloadBytes != 1<<20 {
			t.Errorf("forTable(%q).snapshotConfig() = %+v", c.table, sc)
		}
	}
	if len(cfg.outboxTables()) != 2 || cfg.Decode.MoreTables == nil {
		t.Errorf("forTable changed the router's own configuration: %+v", cfg.Decode)
	}
}

func TestSum(t *testing.T) {
	for _, c := range []struct {
		xs   []int64
		want int64
	}{{nil, 0}, {[]int64{7}, 7}, {[]int64{1, 2, 3}, 6}} {
		if got := sum(c.xs); got != c.want {
			t.Errorf("sum(%v) = %d, want %d", c.xs, got, c.want)
		}
	}
}
