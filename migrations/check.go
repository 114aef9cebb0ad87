package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Problem is a setup error a user can fix. Its message is one sentence that names the fix.
type Problem struct{ Msg string }

func (p *Problem) Error() string { return p.Msg }

func problemf(format string, args ...any) error { return &Problem{Msg: fmt.Sprintf(format, args...)} }

// columnTypes lists, per outbox column, the types the decoder accepts (pg_type names).
var columnTypes = map[string][]string{
	"id":                {"uuid"},
	"aggregate_type":    {"text", "varchar"},
	"aggregate_id":      {"text", "varchar"},
	"aggregate_version": {"int8", "int4", "int2"},
	"event_type":        {"text", "varchar"},
	"schema_version":    {"int4", "int2"},
	"payload":           {"jsonb", "json"},
	"headers":           {"jsonb", "json"},
	"occurred_at":       {"timestamptz"},
}

// Check verifies what `run` needs before it touches a slot: wal_level=logical, the REPLICATION right, the
// outbox table with the expected columns, the publication with that table and inserts, and the router's
// schema. The first problem found is returned as a *Problem.
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
			"(docs/operations.md shows a least-privilege role)", role, pgx.Identifier{role}.Sanitize())
	}
	if err := checkTable(ctx, conn, cfg); err != nil {
		return err
	}
	if err := checkPublication(ctx, conn, cfg); err != nil {
		return err
	}
	var positions *string
	if err := conn.QueryRow(ctx, "SELECT to_regclass($1)::text", cfg.Schema+".positions").Scan(&positions); err != nil {
		return fmt.Errorf("look up router schema: %w", err)
	}
	if positions == nil {
		return problemf("the router's table %s.positions does not exist: run `cdc-router migrate` first", cfg.Schema)
	}
	return nil
}

func checkTable(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	ident := TableIdent(cfg.Table)
	rows, err := conn.Query(ctx, `
		SELECT a.attname, t.typname
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped`, ident.Sanitize())
	if err != nil {
		return fmt.Errorf("read outbox columns: %w", err)
	}
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var c [2]string
		return c, r.Scan(&c[0], &c[1])
	})
	if err != nil {
		return fmt.Errorf("read outbox columns: %w", err)
	}
	if len(found) == 0 {
		return problemf("the outbox table %s does not exist: run `cdc-router migrate` to create it, or point "+
			"--table (CDC_ROUTER_TABLE) at yours", cfg.Table)
	}
	have := map[string]string{}
	for _, c := range found {
		have[c[0]] = c[1]
	}
	names := make([]string, 0, len(columnTypes))
	for name := range columnTypes {
		names = append(names, name)
	}
	sort.Strings(names)
	var bad []string
	for _, name := range names {
		want := columnTypes[name]
		got, ok := have[name]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("column %s is missing", name))
		case !slices.Contains(want, got):
			bad = append(bad, fmt.Sprintf("column %s is %s, want %s", name, got, strings.Join(want, " or ")))
		}
	}
	if len(bad) > 0 {
		return problemf("the outbox table %s does not have the expected shape (%s): alter it to match "+
			"migrations/sql/002_outbox.sql", cfg.Table, strings.Join(bad, "; "))
	}
	var keyed bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
		WHERE i.indrelid = to_regclass($1) AND i.indisunique AND i.indpred IS NULL
		  AND ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord)
		      = ARRAY['aggregate_type', 'aggregate_id', 'aggregate_version'])`, ident.Sanitize()).Scan(&keyed)
	if err != nil {
		return fmt.Errorf("read outbox keys: %w", err)
	}
	if !keyed {
		return problemf("the outbox table %s has no unique key on (aggregate_type, aggregate_id, aggregate_version), "+
			"which snapshots page by and which keeps one version per aggregate: ALTER TABLE %s ADD UNIQUE "+
			"(aggregate_type, aggregate_id, aggregate_version)", cfg.Table, ident.Sanitize())
	}
	return nil
}

func checkPublication(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	var inserts bool
	err := conn.QueryRow(ctx, `SELECT pubinsert FROM pg_publication WHERE pubname = $1`, cfg.Publication).Scan(&inserts)
	if errors.Is(err, pgx.ErrNoRows) {
		return problemf("publication %q does not exist: run `cdc-router migrate`, or point --publication "+
			"(CDC_ROUTER_PUBLICATION) at yours", cfg.Publication)
	}
	if err != nil {
		return fmt.Errorf("read publication: %w", err)
	}
	if !inserts {
		return problemf("publication %q does not publish inserts: ALTER PUBLICATION %s SET (publish = 'insert')",
			cfg.Publication, pgx.Identifier{cfg.Publication}.Sanitize())
	}
	ident := TableIdent(cfg.Table)
	var member bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`, cfg.Publication, ident[0], ident[1]).Scan(&member)
	if err != nil {
		return fmt.Errorf("read publication tables: %w", err)
	}
	if !member {
		return problemf("publication %q does not contain %s: ALTER PUBLICATION %s ADD TABLE %s",
			cfg.Publication, cfg.Table, pgx.Identifier{cfg.Publication}.Sanitize(), ident.Sanitize())
	}
	return nil
}
