package migrations

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// TestSchemaVersionIsTheHighestMigration: the version a binary knows follows the embedded files, so it
// stays right when a file is added.
func TestSchemaVersionIsTheHighestMigration(t *testing.T) {
	if v := SchemaVersion(); v < 8 {
		t.Fatalf("SchemaVersion() = %d, want at least 8 (sql/008_…)", v)
	}
}

// TestSchemaVersionRefusesNewerAndOlder: migrate records the version; a schema a newer cdc-router migrated
// is refused by Check and by Apply (naming the version this one knows and the one it found), and an older
// one by Check (naming migrate), which a repeated migrate then brings up to date.
func TestSchemaVersionRefusesNewerAndOlder(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	cfg := Config{}
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := c.QueryRow(ctx, `SELECT version FROM cdc_router.schema_version`).Scan(&v); err != nil || v != SchemaVersion() {
		t.Fatalf("recorded version %d (%v), want %d", v, err, SchemaVersion())
	}
	newer := SchemaVersion() + 1
	if _, err := c.Exec(ctx, `UPDATE cdc_router.schema_version SET version = $1`, newer); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("this cdc-router knows schema %d; the database was migrated to %d by a newer cdc-router: run that version",
		SchemaVersion(), newer)
	if err := Check(ctx, c, cfg); err == nil || err.Error() != want {
		t.Fatalf("Check on a newer schema = %v, want %q", err, want)
	}
	if err := Apply(ctx, c, cfg); err == nil || err.Error() != want {
		t.Fatalf("Apply on a newer schema = %v, want %q", err, want)
	}
	if _, err := c.Exec(ctx, `UPDATE cdc_router.schema_version SET version = 7`); err != nil {
		t.Fatal(err)
	}
	if err := Check(ctx, c, cfg); err == nil || !strings.Contains(err.Error(), "is at version 7") ||
		!strings.Contains(err.Error(), "run `cdc-router migrate`") {
		t.Fatalf("Check on an older schema = %v, want a problem naming migrate", err)
	}
	if _, err := c.Exec(ctx, `DROP TABLE cdc_router.schema_version`); err != nil {
		t.Fatal(err)
	}
	if err := Check(ctx, c, cfg); err == nil || !strings.Contains(err.Error(), "run `cdc-router migrate`") {
		t.Fatalf("Check on a schema without a version = %v, want a problem naming migrate", err)
	}
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatal(err)
	}
	if err := Check(ctx, c, cfg); err != nil {
		t.Fatalf("Check after migrate again: %v", err)
	}
}
