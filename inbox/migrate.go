package inbox

import (
	"context"
	_ "embed" // schema.sql
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

//go:embed schema.sql
var schemaSQL string

// DefaultSchema is the schema the inbox tables live in when Config.Schema is empty.
const DefaultSchema = "inbox"

// Execer runs one SQL string. *pgx.Conn, *pgxpool.Pool and pgx.Tx all satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Migrate creates the inbox tables in DefaultSchema, or upgrades them in place from an earlier version.
// It is idempotent and safe to run concurrently, and on an up-to-date schema it takes no table lock, so a
// consumer may call it at every start. After an upgrade from a version without consumer names, the
// existing records belong to the empty consumer name until AdoptRecords gives them to their consumer.
func Migrate(ctx context.Context, conn Execer) error {
	return MigrateSchema(ctx, conn, DefaultSchema)
}

// MigrateSchema creates or upgrades the inbox tables in the named schema (created if missing), as
// Migrate does. It is idempotent.
func MigrateSchema(ctx context.Context, conn Execer, schema string) error {
	if schema == "" {
		return fmt.Errorf("migrate inbox: empty schema name")
	}
	if strings.Contains(schema, "$migrate$") {
		return fmt.Errorf("migrate inbox: schema name %q contains $migrate$; choose another name", schema)
	}
	// Without arguments pgx sends the text with the simple protocol: one implicit transaction, which
	// holds the advisory lock taken by its first statement until the last one is done.
	if _, err := conn.Exec(ctx, inSchema(schemaSQL, schema)); err != nil {
		return fmt.Errorf("migrate inbox schema %q: %w", schema, err)
	}
	return nil
}

// inSchema replaces the {schema} placeholder by the quoted schema name, and {schema_literal} by that
// quoted name as an SQL string literal.
func inSchema(sql, schema string) string {
	ident := pgx.Identifier{schema}.Sanitize()
	literal := "'" + strings.ReplaceAll(ident, "'", "''") + "'"
	return strings.NewReplacer("{schema}", ident, "{schema_literal}", literal).Replace(sql)
}
