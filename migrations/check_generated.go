package migrations

import (
	"context"
	"fmt"
	"slices"
	"sort"

	"github.com/jackc/pgx/v5"
)

// checkGenerated refuses an outbox column the router reads that PostgreSQL computes (GENERATED ALWAYS AS
// …) and the publication does not carry: pgoutput sends a stored generated column only from PostgreSQL
// 18 on, when the publication has publish_generated_columns = stored (migration 014 sets it) or lists the
// column; a virtual one (18) never. Without this check the table passes and the stream stops at the first
// insert, whose Relation message lacks the column. The snapshot reads such a column like any other.
func checkGenerated(ctx context.Context, conn *pgx.Conn, cfg Config, have map[string]outboxColumn) error {
	var generated []string
	for _, name := range readColumnNames(cfg, have) {
		if have[name].generated != "" {
			generated = append(generated, name)
		}
	}
	if len(generated) == 0 {
		return nil
	}
	sort.Strings(generated)
	var version int
	var release string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).
		Scan(&version, &release); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	name := generated[0]
	ident := TableIdent(cfg.Table)
	if version < 180000 {
		return problemf("column %s of %s is a generated column, and pgoutput publishes generated columns only from "+
			"PostgreSQL 18 on (publish_generated_columns); this server is PostgreSQL %s, so the router would stop at "+
			"the first insert: make it an ordinary column the writer fills (or a BEFORE INSERT trigger: ALTER TABLE %s "+
			"ALTER COLUMN %s DROP EXPRESSION keeps the values written so far), or upgrade to PostgreSQL 18 and run "+
			"`cdc-router migrate`", name, cfg.Table, release, ident.Sanitize(), pgx.Identifier{name}.Sanitize())
	}
	for _, name := range generated {
		if have[name].generated == "v" {
			return problemf("column %s of %s is a virtual generated column, which PostgreSQL never publishes: "+
				"re-create it as GENERATED ALWAYS AS (…) STORED, then run `cdc-router migrate`", name, cfg.Table)
		}
	}
	var published []string
	err := conn.QueryRow(ctx, `SELECT coalesce((SELECT attnames::text[] FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3), '{}')`, cfg.Publication, ident[0], ident[1]).Scan(&published)
	if err != nil {
		return fmt.Errorf("read publication columns: %w", err)
	}
	if len(published) == 0 {
		return nil // not in the publication: checkPublication says so
	}
	for _, name := range generated {
		if !slices.Contains(published, name) {
			return problemf("column %s of %s is a generated column that publication %q does not publish, so the "+
				"router would stop at the first insert: run `cdc-router migrate` (or, as the publication's owner, ALTER "+
				"PUBLICATION %s SET (publish_generated_columns = stored))", name, cfg.Table, cfg.Publication,
				pgx.Identifier{cfg.Publication}.Sanitize())
		}
	}
	return nil
}

// readColumnNames is the columns of the table (have) the router reads: every native column, or each
// column the mapping names that the table has, except one an option at its default would name whose type
// that option does not read (left unused).
func readColumnNames(cfg Config, have map[string]outboxColumn) []string {
	if cfg.Mapping == nil {
		return slices.Clone(columnOrder)
	}
	var out []string
	for _, r := range cfg.Mapping.Columns() {
		got, ok := have[r.Column]
		if !ok || r.IfTyped && !slices.Contains(r.Types, got.typ) || slices.Contains(out, r.Column) {
			continue
		}
		out = append(out, r.Column)
	}
	return out
}
