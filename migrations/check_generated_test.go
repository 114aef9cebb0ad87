package migrations

import (
	"context"
	"testing"
)

// TestCheckRefusesAGeneratedNativeColumn: a native outbox whose event_type PostgreSQL computes passes the
// type checks but is never published before PostgreSQL 18; Check refuses it naming the column, the server's
// version and the DROP EXPRESSION fix, which makes Check pass.
func TestCheckRefusesAGeneratedNativeColumn(t *testing.T) {
	c := migrated(t)
	var version int
	if err := c.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version >= 180000 {
		t.Fatalf("PostgreSQL %d: this test needs a version before 18 (cmd/cdc-router's TestGeneratedColumnOnPostgres18 covers 18)", version)
	}
	exec(t, c, `ALTER TABLE outbox DROP COLUMN event_type`)
	exec(t, c, `ALTER TABLE outbox ADD COLUMN event_type text GENERATED ALWAYS AS (aggregate_type || '.created') STORED`)
	problem(t, c, Config{}, `column event_type of public.outbox is a generated column`, "only from PostgreSQL 18 on",
		"this server is PostgreSQL 1", `ALTER TABLE "public"."outbox" ALTER COLUMN "event_type" DROP EXPRESSION`)
	exec(t, c, `ALTER TABLE outbox ALTER COLUMN event_type DROP EXPRESSION`)
	if err := Check(context.Background(), c, Config{}); err != nil {
		t.Fatalf("Check after the fix: %v", err)
	}
}
