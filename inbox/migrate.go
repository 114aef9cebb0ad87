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

// Migrate creates the inbox tables in DefaultSchema. It is idempotent and safe to run concurrently, so
// a consumer may call it at every start.
func Migrate(ctx context.Context, conn Execer) error {
	return MigrateSchema(ctx, conn, DefaultSchema)
}

// MigrateSchema creates the inbox tables in the named schema (created if missing). It is idempotent.
func MigrateSchema(ctx context.Context, conn Execer, schema string) error {
	if schema == "" {
		return fmt.Errorf("migrate inbox: empty schema name")
	}
	// Without arguments pgx sends the text with the simple protocol: one implicit transaction, which
	// holds the advisory lock taken by its first statement until the last one is done.
	if _, err := conn.Exec(ctx, inSchema(schemaSQL, schema)); err != nil {
		return fmt.Errorf("migrate inbox schema %q: %w", schema, err)
	}
	return nil
}

// inSchema replaces the {schema} placeholder by the quoted schema name.
func inSchema(sql, schema string) string {
	return strings.ReplaceAll(sql, "{schema}", pgx.Identifier{schema}.Sanitize())
}
