package main

import (
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestMigrateWarnsWithoutLogicalWAL: migrate succeeds on a server with wal_level=replica, where the router
// cannot stream, and says so on stderr, naming the fix; on a server with wal_level=logical it says nothing.
func TestMigrateWarnsWithoutLogicalWAL(t *testing.T) {
	replica, err := testenv.StartPostgres("wal_level=replica")
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	_, stderr, code := runCLI(t, nil, "migrate", "--pg-url", replica.NewDatabase(t))
	if code != 0 || !strings.Contains(stderr, `cdc-router migrate: warning: wal_level is "replica"`) ||
		!strings.Contains(stderr, "ALTER SYSTEM SET wal_level = logical") {
		t.Errorf("migrate on wal_level=replica: exit %d, stderr %q; want 0 and the warning", code, stderr)
	}
	if _, stderr, code := runCLI(t, nil, "migrate", "--pg-url", pg.NewDatabase(t)); code != 0 || strings.Contains(stderr, "warning") {
		t.Errorf("migrate on wal_level=logical: exit %d, stderr %q; want 0 and no warning", code, stderr)
	}
}
