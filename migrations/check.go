package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Problem is a setup error a user can fix. Its message is one sentence that names the fix.
type Problem struct{ Msg string }

func (p *Problem) Error() string { return p.Msg }

func problemf(format string, args ...any) error { return &Problem{Msg: fmt.Sprintf(format, args...)} }

// Check verifies what `run` needs before it touches a slot: wal_level=logical, the REPLICATION right, room
// for a slot and a walsender, each outbox table (Table and MoreTables) with the expected columns, NOT NULL keys and a unique key,
// a publication that publishes inserts of the outbox table and nothing else (with every column it needs),
// the router's schema as the migrations leave it, and the role's privileges on all of it. The first
// problem found is returned as a *Problem; privileges come last and are reported all at once.
func Check(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	cfg = cfg.Defaults()
	var walLevel string
	if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
		return fmt.Errorf("read wal_level: %w", err)
	}
	if walLevel != "logical" {
		return problemf("wal_level is %q but logical replication needs wal_level=logical: set it in postgresql.conf "+
			"(ALTER SYSTEM SET wal_level = logical) and restart PostgreSQL", walLevel)
	}
	var canReplicate bool
	var role string
	if err := conn.QueryRow(ctx, `SELECT rolreplication OR rolsuper, rolname FROM pg_roles WHERE rolname = current_user`).
		Scan(&canReplicate, &role); err != nil {
		return fmt.Errorf("read role: %w", err)
	}
	if !canReplicate {
		return problemf("role %q has no REPLICATION right: run ALTER ROLE %s WITH REPLICATION as a superuser "+
			"(docs/howto/set-up-the-database.md#database-role-and-access shows a least-privilege role)", role, pgx.Identifier{role}.Sanitize())
	}
	if err := checkSettings(ctx, conn); err != nil {
		return err
	}
	for _, t := range cfg.outboxes() {
		if err := checkTable(ctx, conn, cfg.forTable(t)); err != nil {
			return err
		}
	}
	if err := checkShard(ctx, conn, cfg); err != nil { // first: on PostgreSQL 14 a shard's publication cannot exist
		return err
	}
	if err := checkPublication(ctx, conn, cfg); err != nil {
		return err
	}
	tables, err := checkRouterSchema(ctx, conn, cfg)
	if err != nil {
		return err
	}
	if err := checkGrants(ctx, conn, cfg, role, tables); err != nil {
		return err
	}
	return CheckSchemaVersion(ctx, conn, cfg.Schema)
}

// checkSettings refuses a server that can hold no replication slot or serve no replication connection.
func checkSettings(ctx context.Context, conn *pgx.Conn) error {
	var slots, senders int
	err := conn.QueryRow(ctx, `SELECT current_setting('max_replication_slots')::int,
		current_setting('max_wal_senders')::int`).Scan(&slots, &senders)
	if err != nil {
		return fmt.Errorf("read replication settings: %w", err)
	}
	if slots == 0 {
		return problemf("max_replication_slots is 0, so PostgreSQL cannot keep the router's slot: run " +
			"ALTER SYSTEM SET max_replication_slots = 10 as a superuser and restart PostgreSQL")
	}
	if senders == 0 {
		return problemf("max_wal_senders is 0, so PostgreSQL accepts no replication connection: run " +
			"ALTER SYSTEM SET max_wal_senders = 10 as a superuser and restart PostgreSQL")
	}
	return nil
}
