package migrations

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestWALLevelWarning: on a server with wal_level=replica, where migrate succeeds but the router cannot
// stream, the warning is one sentence naming the setting and the fix; with wal_level=logical there is none.
func TestWALLevelWarning(t *testing.T) {
	ctx := context.Background()
	replica, err := testenv.StartPostgres("wal_level=replica")
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	c, err := pgx.Connect(ctx, replica.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := Apply(ctx, c, Config{}); err != nil {
		t.Fatalf("migrate on wal_level=replica: %v", err)
	}
	warning, err := WALLevelWarning(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("warning: %s", warning)
	for _, want := range []string{`wal_level is "replica"`, "ALTER SYSTEM SET wal_level = logical", "restart PostgreSQL"} {
		if !strings.Contains(warning, want) {
			t.Errorf("warning %q lacks %q", warning, want)
		}
	}

	if warning, err := WALLevelWarning(ctx, connect(t)); warning != "" || err != nil {
		t.Errorf("wal_level=logical: %q, %v; want no warning", warning, err)
	}
}
