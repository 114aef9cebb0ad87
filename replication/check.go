package replication

import (
	"context"
	"log/slog"

	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/pgserver"
)

// Check runs the start-up checks a run makes before it takes the slot (the tables and their mappings, the
// publication, the router's schema and its grants, the emit keys with a message prefix) and opens the
// replication connection once (the REPLICATION right, wal_level, the pg_hba.conf line), without taking
// the slot's lock, creating anything or streaming: `cdc-router config check`.
func Check(ctx context.Context, cfg Config, log *slog.Logger) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	sql, err := pgserver.ConnectSQLWithin(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return err
	}
	defer sql.Close(context.WithoutCancel(ctx))
	if err := migrations.Check(ctx, sql, cfg.migrationsConfig(log)); err != nil {
		return err
	}
	if cfg.Decode.MessagePrefix != "" {
		if _, err := migrations.LoadEmitKeys(ctx, sql, cfg.Schema); err != nil {
			return err
		}
	}
	conn, _, err := connectReplication(ctx, cfg.PGURL, cfg.PGTimeout, 0)
	if err != nil {
		return err
	}
	return conn.Close(context.WithoutCancel(ctx))
}
