package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// SchemaVersion is the version of the router's schema this binary knows: the highest numeric prefix of
// its embedded migration files (sql/008_….sql is 8). `migrate` records it in <schema>.schema_version.
func SchemaVersion() int {
	names, _ := fs.Glob(files, "sql/*.sql")
	highest := 0
	for _, name := range names {
		digits, _, _ := strings.Cut(path.Base(name), "_")
		if n, err := strconv.Atoi(digits); err == nil && n > highest {
			highest = n
		}
	}
	return highest
}

// storedVersion reads <schema>.schema_version: 0 when the table or its row does not exist yet (a schema
// that predates 008, or none at all). A role that may not read it gets a Problem naming the GRANT.
func storedVersion(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, schema string) (int, error) {
	table := pgx.Identifier{schema, "schema_version"}.Sanitize()
	var exists, readable bool
	var role string
	err := q.QueryRow(ctx, `SELECT n.oid IS NOT NULL AND EXISTS (SELECT 1 FROM pg_class c WHERE c.relnamespace = n.oid
			AND c.relname = 'schema_version'),
		coalesce(has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege((SELECT c.oid FROM pg_class c
			WHERE c.relnamespace = n.oid AND c.relname = 'schema_version'), 'SELECT'), false), current_user
		FROM (SELECT (SELECT oid FROM pg_namespace WHERE nspname = $1) AS oid) n`, schema).Scan(&exists, &readable, &role)
	if err != nil || !exists {
		return 0, err
	}
	if !readable {
		return 0, problemf("role %q may not read the router's schema version: run GRANT USAGE ON SCHEMA %s TO %s; "+
			"GRANT SELECT ON %s TO %s", role, pgx.Identifier{schema}.Sanitize(), pgx.Identifier{role}.Sanitize(), table,
			pgx.Identifier{role}.Sanitize())
	}
	var v int
	if err := q.QueryRow(ctx, `SELECT coalesce((SELECT version FROM `+table+`), 0)`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read the router's schema version: %w", err)
	}
	return v, nil
}

// newerSchema is the refusal of a schema that a newer cdc-router migrated.
func newerSchema(known, stored int) error {
	return problemf("this cdc-router knows schema %d; the database was migrated to %d by a newer cdc-router: run that version", known, stored)
}

// CheckSchemaVersion refuses a router schema other than the one this binary knows: a newer one (a newer
// cdc-router migrated it, and this one would not maintain what it added) and an older one, or none (run
// `cdc-router migrate`). Every command that reads or writes the router's schema calls it (run through Check).
func CheckSchemaVersion(ctx context.Context, conn *pgx.Conn, schema string) error {
	if schema == "" {
		schema = Config{}.Defaults().Schema
	}
	known := SchemaVersion()
	stored, err := storedVersion(ctx, conn, schema)
	switch {
	case err != nil:
		return err
	case stored > known:
		return newerSchema(known, stored)
	case stored == 0:
		return problemf("the router's schema %s has no schema version (it predates this cdc-router, which needs schema %d): "+
			"run `cdc-router migrate`", schema, known)
	case stored < known:
		return problemf("the router's schema %s is at version %d, but this cdc-router needs schema %d: run `cdc-router migrate`",
			schema, stored, known)
	}
	return nil
}

// newerVersion refuses a schema that a newer cdc-router migrated, before Check looks at its tables (a newer
// version may have changed them); it says nothing when the role may not read the version yet, which the
// grants check then names.
func newerVersion(ctx context.Context, conn *pgx.Conn, schema string) error {
	stored, err := storedVersion(ctx, conn, schema)
	var p *Problem
	if errors.As(err, &p) {
		return nil
	}
	if err == nil && stored > SchemaVersion() {
		return newerSchema(SchemaVersion(), stored)
	}
	return err
}

// recordVersion writes SchemaVersion into <schema>.schema_version after the migrations ran, never lowering
// it, and writing only when it changes (so a repeated migrate needs no UPDATE right).
func recordVersion(ctx context.Context, tx pgx.Tx, schema string) error {
	table := pgx.Identifier{schema, "schema_version"}.Sanitize()
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` (version) SELECT $1::int WHERE NOT EXISTS (SELECT 1 FROM `+table+`)`, SchemaVersion())
	if err == nil {
		_, err = tx.Exec(ctx, `UPDATE `+table+` SET version = $1, migrated_at = now() WHERE version < $1`, SchemaVersion())
	}
	if err != nil {
		return fmt.Errorf("migrate: record schema version %d: %w", SchemaVersion(), err)
	}
	return nil
}
