package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// WALLevelWarning is what migrate says after it succeeded on a server whose wal_level is not logical: one
// sentence naming the fix, since the migration works there but the router cannot stream (run refuses it
// in Check). It is "" with wal_level=logical.
func WALLevelWarning(ctx context.Context, conn *pgx.Conn) (string, error) {
	var level string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		return "", fmt.Errorf("read wal_level: %w", err)
	}
	if level == "logical" {
		return "", nil
	}
	return fmt.Sprintf("wal_level is %q, so `cdc-router run` cannot stream from this server: run ALTER SYSTEM SET "+
		"wal_level = logical as a superuser (or set it in postgresql.conf), then restart PostgreSQL", level), nil
}
