package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/migrations"
)

// TestNewerSchemaIsRefused: a router schema that a newer cdc-router migrated used to be run on without a
// word, leaving whatever the newer version added unmaintained. run, status and backfill now refuse it,
// naming both versions.
func TestNewerSchemaIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	newer := migrations.SchemaVersion() + 1
	e.exec(`UPDATE cdc_router.schema_version SET version = $1`, newer)
	want := fmt.Sprintf("this cdc-router knows schema %d; the database was migrated to %d by a newer cdc-router: run that version",
		migrations.SchemaVersion(), newer)
	e.expectRefusal(want)
	for _, args := range [][]string{{"status", "--slot", e.slot}, {"backfill", "--where", "true", "--exchange", e.exchange}} {
		if out, code := e.cli(args...); code == 0 || !strings.Contains(out, want) {
			t.Errorf("%s: exit %d, output %q; want a refusal with %q", args[0], code, out, want)
		}
	}
	if n := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot); n != "0" {
		t.Errorf("the refusing router created its slot")
	}
}
