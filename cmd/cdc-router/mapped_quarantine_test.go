package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMappedQuarantineNamesItsTable: beside a native outbox (the first --table), a mapped table's rows that
// cannot be published are quarantined with the mapped table's name and its own columns: one refused by the
// decoder's check (a routing key over 255 bytes) and one refused by the publisher (a header placement over
// frame_max). `quarantine show` prints them; the rows after them are published.
func TestMappedQuarantineNamesItsTable(t *testing.T) {
	e := newStreamEnv(t)
	e.exec(debeziumTable)
	e.exec(`ALTER TABLE dbz_outbox ADD COLUMN note text`)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE dbz_outbox`)
	c := e.consume(e.queue)
	config := writeConfig(t, "table=public.dbz_outbox\ntable.fields.additional.placement=note:header\n")
	e.startStreaming("--table", "public.outbox", "--table", "public.dbz_outbox", "--config", config, "--snapshot", "never")
	const longKey, bigHeader, after = "a0000000-0000-4000-8000-000000000001", "a0000000-0000-4000-8000-000000000002",
		"a0000000-0000-4000-8000-000000000003"
	ctx := context.Background()
	var native string
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		native = insertVersioned(t, tx, "outbox", "agg-n", 1)
		_, err := tx.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload, note) VALUES
			($1, repeat('k', 250), 'c-1', 'Long', '{}', 'n1'),
			($2, 'customer', 'c-1', 'Big', '{}', repeat('h', 200000)),
			($3, 'customer', 'c-1', 'After', '{}', 'n3')`, longKey, bigHeader, after)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := e.deliveriesByID(c, 2)
	if _, ok := got[after]; !ok {
		t.Errorf("the mapped row after the quarantined ones was not published: %v", got)
	}
	if _, ok := got[native]; !ok {
		t.Errorf("the native row was not published")
	}
	e.waitQuarantined(2, 30*time.Second)
	for _, id := range []string{longKey, bigHeader} {
		var table, reason string
		var columns []string
		if err := e.db.QueryRow(ctx, `SELECT table_name, reason, array(SELECT jsonb_object_keys(row_values) ORDER BY 1)
			FROM cdc_router.quarantine WHERE event_id = $1`, id).Scan(&table, &reason, &columns); err != nil {
			t.Fatal(err)
		}
		want := "aggregateid aggregatetype created_at id note payload tracingspancontext type"
		if strings.Contains(reason, "aggregate_") {
			t.Errorf("record of %s: the reason names the native columns: %s", id, reason)
		}
		if table != "public.dbz_outbox" || strings.Join(columns, " ") != want {
			t.Errorf("record of %s: table %s, columns %v; want public.dbz_outbox and %s (reason %s)", id, table, columns, want, reason)
		}
		show, code := e.cli("quarantine", "show", e.recordID(id))
		if code != 0 || !strings.Contains(show, "public.dbz_outbox") || !strings.Contains(show, `"aggregatetype"`) ||
			strings.Contains(show, "aggregate_type") {
			t.Errorf("quarantine show %s: exit %d\n%.3000s", id, code, show)
		}
	}
	if v := e.scalar(`SELECT row_values->>'aggregatetype' FROM cdc_router.quarantine WHERE event_id = $1`, longKey); v != strings.Repeat("k", 250) {
		t.Errorf("stored aggregatetype %q", v)
	}
}
