package migrations

import (
	"context"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/decode"
)

// TestCheckSeveralOutboxTables: with MoreTables, each table is checked (a second table's missing column is
// named), every one must be in the publication (the ADD TABLE names all that are missing, and applying it
// passes), a column list is checked per table, and the further outboxes do not count as other tables.
func TestCheckSeveralOutboxTables(t *testing.T) {
	c := migrated(t)
	exec(t, c, `CREATE TABLE outbox_b (LIKE outbox INCLUDING ALL)`)
	exec(t, c, `CREATE SCHEMA billing`)
	exec(t, c, `CREATE TABLE billing.outbox (LIKE outbox INCLUDING ALL)`)
	cfg := Config{MoreTables: []decode.Outbox{{Table: "outbox_b"}, {Table: "billing.outbox"}}}

	exec(t, c, `ALTER TABLE billing.outbox DROP COLUMN headers`)
	problem(t, c, cfg, "billing.outbox", "headers")
	exec(t, c, `ALTER TABLE billing.outbox ADD COLUMN headers jsonb NOT NULL DEFAULT '{}'`)

	msg := problem(t, c, cfg, `publication "cdc_router_outbox" does not contain outbox_b, billing.outbox`)
	_, add, _ := strings.Cut(msg, "billing.outbox: ")
	if add != `ALTER PUBLICATION "cdc_router_outbox" ADD TABLE "public"."outbox_b", "billing"."outbox"` {
		t.Fatalf("the fix is %q, want one ADD TABLE of both", add)
	}
	exec(t, c, add)
	if err := Check(context.Background(), c, cfg); err != nil {
		t.Fatalf("Check after the named ADD TABLE: %v", err)
	}

	exec(t, c, `ALTER PUBLICATION cdc_router_outbox SET TABLE outbox, outbox_b (id, payload) WHERE (event_type <> 'x'),
		billing.outbox`)
	msg = problem(t, c, cfg, "publishes only the columns", "of outbox_b")
	set := fix(t, msg, "run ", " to publish every column")
	if set != `BEGIN; ALTER PUBLICATION "cdc_router_outbox" DROP TABLE "public"."outbox_b"; ALTER PUBLICATION "cdc_router_outbox" ADD TABLE "public"."outbox_b" WHERE ((event_type <> 'x'::text)); COMMIT;` {
		t.Errorf("the column-list fix %q does not replace outbox_b alone, keeping its row filter", set)
	}
	exec(t, c, set)
	if err := Check(context.Background(), c, cfg); err != nil {
		t.Fatalf("Check after the named fix: %v (the fix must keep the other outbox tables)", err)
	}
	exec(t, c, `CREATE TABLE other (id int)`)
	exec(t, c, `ALTER PUBLICATION cdc_router_outbox SET TABLE outbox, outbox_b, billing.outbox, other`)
	msg = problem(t, c, cfg, "also publishes public.other,", "any table but public.outbox, outbox_b, billing.outbox")
	if fix(t, msg, "run ", ", or use") != `ALTER PUBLICATION "cdc_router_outbox" DROP TABLE "public"."other"` {
		t.Errorf("the fix drops more than the other table: %s", msg)
	}
}
