package decode

import (
	"errors"
	"strings"
	"testing"
)

// TestDecodeSeveralOutboxTables: inserts into two native outbox tables and a mapped one, interleaved in
// one transaction, are events in WAL order, each read by its own table's shape; an insert into a table
// that is none of them is drift naming every outbox table.
func TestDecodeSeveralOutboxTables(t *testing.T) {
	const a, b, c, other = 16385, 16386, 16387, 16400
	const id3 = "c2aade11-1e2d-4ef8-bb6d-6bb9bd380a33"
	m, err := parseMapping("table=public.dbz\n")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	var types []uint32
	var values []tv
	for _, col := range with(debeziumRow(), mcol{"id", oidUUID, text(id3)}) {
		names, types, values = append(names, col.name), append(types, col.oid), append(values, col.v)
	}
	cfg := Config{Table: "public.outbox", MoreTables: []Outbox{{Table: "outbox_b"}, {Table: "public.dbz", Mapping: m}}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	rec, err := decodeFrames(cfg, []frame{
		{0, encRelation(a, "public", "outbox", outboxColumns()...)},
		{0, encRelation(b, "public", "outbox_b", outboxColumns()...)},
		{0, encRelationTypes(c, "public", "dbz", names, types)},
		{0x100, encBegin(0x200, 7)},
		{0x110, encInsert(b, outboxRow(id1, "1")...)},
		{0x120, encInsert(c, values...)},
		{0x130, encInsert(a, outboxRow(id2, "2")...)},
		{0x210, encCommit(0x200, 0x210)},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := "B E " + id1 + " E " + id3 + " E " + id2 + " C"
	if got := strings.Join(rec.shape, " "); got != want {
		t.Fatalf("decoded %q, want %q", got, want)
	}
	if rec.events[1].Mapped == nil || rec.events[1].Mapped.RoutingKey != "outbox.event.Order" {
		t.Errorf("the dbz row was not read by its mapping: %+v", rec.events[1])
	}
	if rec.events[0].Mapped != nil || rec.events[2].Mapped != nil || rec.events[2].AggregateVersion != 2 {
		t.Errorf("the native rows were not read in the native shape: %+v, %+v", rec.events[0], rec.events[2])
	}

	_, err = decodeFrames(cfg, []frame{{0, encRelation(other, "public", "other", outboxColumns()...)},
		{0x100, encBegin(0x200, 7)}, {0x110, encInsert(other, outboxRow(id1, "1")...)}})
	var drift *DriftError
	if !errors.As(err, &drift) || !strings.Contains(err.Error(), "is not one of the outbox tables public.outbox, public.outbox_b, public.dbz") ||
		drift.Outbox != "public.outbox, public.outbox_b, public.dbz" ||
		!strings.Contains(err.Error(), "put public.other in its place in --table") {
		t.Fatalf("insert into another table: %v, want a DriftError naming the three outbox tables", err)
	}
}

// TestConfigValidateMoreTables refuses a table named twice, also once qualified and once not.
func TestConfigValidateMoreTables(t *testing.T) {
	err := Config{Table: "outbox", MoreTables: []Outbox{{Table: "public.outbox"}}}.Validate()
	if err == nil || !strings.Contains(err.Error(), "table public.outbox is named twice") {
		t.Errorf("outbox and public.outbox: %v", err)
	}
	if err := (Config{MoreTables: []Outbox{{Table: "s."}}}).Validate(); err == nil {
		t.Error("a table without a name was accepted")
	}
}

// TestParseMappingTable reads the table a mapping file maps, qualified, and refuses an empty one.
func TestParseMappingTable(t *testing.T) {
	if m, err := parseMapping("table=orders_outbox\n"); err != nil || m.Table != "public.orders_outbox" {
		t.Errorf("table=orders_outbox: %v, %+v", err, m)
	}
	if _, err := parseMapping("table=\n"); err == nil || !strings.Contains(err.Error(), "name the outbox table this file maps") {
		t.Errorf("table= empty: %v", err)
	}
}

// TestDecodeOutboxMatchKeepsSchemaAndNameApart: the outbox "a"."b.c" (--table a.b.c) is not the relation
// "a.b"."c", although both print as a.b.c.
func TestDecodeOutboxMatchKeepsSchemaAndNameApart(t *testing.T) {
	const oid = 16385
	_, err := decodeFrames(Config{Table: "a.b.c"}, []frame{{0, encRelation(oid, "a.b", "c", outboxColumns()...)},
		{0x100, encBegin(0x200, 7)}, {0x110, encInsert(oid, outboxRow(id1, "1")...)}})
	var drift *DriftError
	if !errors.As(err, &drift) {
		t.Fatalf("an insert into \"a.b\".\"c\" with the outbox \"a\".\"b.c\": %v, want a DriftError", err)
	}
}
