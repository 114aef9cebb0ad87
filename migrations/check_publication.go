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

// checkPublication refuses a publication that does not publish the outbox table's inserts, that publishes
// any other table (the router stops at an insert into a table that is not its outbox, taking it for a renamed
// one), or, from PostgreSQL 15 on, whose column list leaves out a column the router needs. A row filter is
// the user's choice and is kept.
func checkPublication(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	var inserts, allTables, viaRoot bool
	err := conn.QueryRow(ctx, `SELECT pubinsert, puballtables, pubviaroot FROM pg_publication WHERE pubname = $1`,
		cfg.Publication).Scan(&inserts, &allTables, &viaRoot)
	if errors.Is(err, pgx.ErrNoRows) {
		return problemf("publication %q does not exist: run `cdc-router migrate`, or point --publication "+
			"(CDC_ROUTER_PUBLICATION) at yours", cfg.Publication)
	}
	if err != nil {
		return fmt.Errorf("read publication: %w", err)
	}
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	if !inserts {
		return problemf("publication %q does not publish inserts: ALTER PUBLICATION %s SET (publish = 'insert')",
			cfg.Publication, pub)
	}
	var missing, missingIdents []string
	for _, t := range cfg.outboxes() {
		if err := checkViaRoot(ctx, conn, cfg.forTable(t), viaRoot); err != nil {
			return err
		}
		ident := TableIdent(t.Table)
		var member bool
		err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_tables
			WHERE pubname = $1 AND schemaname = $2 AND tablename = $3)`, cfg.Publication, ident[0], ident[1]).Scan(&member)
		if err != nil {
			return fmt.Errorf("read publication tables: %w", err)
		}
		if !member {
			missing, missingIdents = append(missing, t.Table), append(missingIdents, ident.Sanitize())
		}
	}
	if len(missing) > 0 {
		return problemf("publication %q does not contain %s: ALTER PUBLICATION %s ADD TABLE %s",
			cfg.Publication, strings.Join(missing, ", "), pub, strings.Join(missingIdents, ", "))
	}
	own := "cdc_router_outbox"
	if cfg.Publication == own {
		own = "cdc_router_outbox_only"
	}
	dedicated := fmt.Sprintf("use a publication of its own: `cdc-router migrate --publication %s`, then run with "+
		"--publication %s", own, own)
	if allTables {
		return problemf("publication %q publishes every table (FOR ALL TABLES), and the router stops at an insert "+
			"into any table but %s: %s", cfg.Publication, outboxList(cfg), dedicated)
	}
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	if err := checkOtherTables(ctx, conn, cfg, version, dedicated); err != nil {
		return err
	}
	if version < 150000 {
		return nil // no column lists or row filters before PostgreSQL 15
	}
	for _, t := range cfg.outboxes() {
		if err := checkColumnList(ctx, conn, cfg.forTable(t)); err != nil {
			return err
		}
	}
	return nil
}

// outboxList names the outbox tables: "a" or "a, b".
func outboxList(cfg Config) string {
	var names []string
	for _, t := range cfg.outboxes() {
		names = append(names, t.Table)
	}
	return strings.Join(names, ", ")
}

// checkViaRoot refuses a publication without publish_via_partition_root for a partitioned outbox: its
// inserts would arrive under the names of its partitions, which the stream refuses as tables that are not
// the outbox (decode's drift check) rather than publish or drop.
func checkViaRoot(ctx context.Context, conn *pgx.Conn, cfg Config, viaRoot bool) error {
	if viaRoot {
		return nil
	}
	ident := TableIdent(cfg.Table)
	var partitioned bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind = 'p')`, ident[0], ident[1]).Scan(&partitioned)
	if err != nil || !partitioned {
		return wrapErr("read outbox table kind", err)
	}
	return problemf("publication %q does not publish through the partition root, so inserts into the partitioned "+
		"outbox table %s would arrive under the names of its partitions, which the router refuses: ALTER PUBLICATION "+
		"%s SET (publish_via_partition_root = true)", cfg.Publication, cfg.Table, pgx.Identifier{cfg.Publication}.Sanitize())
}

// checkOtherTables names the tables besides the outbox, and the fix: DROP TABLE for the tables listed on
// their own, DROP TABLES IN SCHEMA for a schema the publication publishes whole (PostgreSQL 15+), and then
// ADD TABLE for the outbox when it was only there through its schema.
func checkOtherTables(ctx context.Context, conn *pgx.Conn, cfg Config, version int, dedicated string) error {
	var schemaNames, tableNames []string
	for _, t := range cfg.outboxes() {
		ident := TableIdent(t.Table)
		schemaNames, tableNames = append(schemaNames, ident[0]), append(tableNames, ident[1])
	}
	rows, err := conn.Query(ctx, `SELECT schemaname, tablename FROM pg_publication_tables
		WHERE pubname = $1 AND NOT EXISTS (SELECT 1 FROM unnest($2::text[], $3::text[]) AS o(s, t)
			WHERE o.s = schemaname AND o.t = tablename) ORDER BY 1, 2`, cfg.Publication, schemaNames, tableNames)
	if err != nil {
		return fmt.Errorf("read publication tables: %w", err)
	}
	others, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pgx.Identifier, error) {
		var s, t string
		return pgx.Identifier{s, t}, r.Scan(&s, &t)
	})
	if err != nil || len(others) == 0 {
		return wrapErr("read publication tables", err)
	}
	var schemas []string
	if version >= 150000 {
		rows, err := conn.Query(ctx, `SELECT n.nspname FROM pg_publication_namespace pn
			JOIN pg_publication p ON p.oid = pn.pnpubid JOIN pg_namespace n ON n.oid = pn.pnnspid
			WHERE p.pubname = $1 ORDER BY 1`, cfg.Publication)
		if err != nil {
			return fmt.Errorf("read publication schemas: %w", err)
		}
		if schemas, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return fmt.Errorf("read publication schemas: %w", err)
		}
	}
	var unlisted []string // outbox tables in the publication only through their schema, not by name
	for _, t := range cfg.outboxes() {
		ident := TableIdent(t.Table)
		var listed bool
		err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication_rel pr
			JOIN pg_publication p ON p.oid = pr.prpubid JOIN pg_class c ON c.oid = pr.prrelid
			JOIN pg_namespace n ON n.oid = c.relnamespace WHERE p.pubname = $1 AND n.nspname = $2 AND c.relname = $3)`,
			cfg.Publication, ident[0], ident[1]).Scan(&listed)
		if err != nil {
			return fmt.Errorf("read publication tables: %w", err)
		}
		if !listed && slices.Contains(schemas, ident[0]) {
			unlisted = append(unlisted, ident.Sanitize())
		}
	}
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	var names, drop, fixes []string
	for _, t := range others {
		names = append(names, t[0]+"."+t[1])
		if !slices.Contains(schemas, t[0]) {
			drop = append(drop, t.Sanitize())
		}
	}
	if len(drop) > 0 {
		fixes = append(fixes, fmt.Sprintf("ALTER PUBLICATION %s DROP TABLE %s", pub, strings.Join(drop, ", ")))
	}
	if len(schemas) > 0 {
		quoted := make([]string, len(schemas))
		for i, s := range schemas {
			quoted[i] = pgx.Identifier{s}.Sanitize()
		}
		fixes = append(fixes, fmt.Sprintf("ALTER PUBLICATION %s DROP TABLES IN SCHEMA %s", pub, strings.Join(quoted, ", ")))
		if len(unlisted) > 0 {
			fixes = append(fixes, fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", pub, strings.Join(unlisted, ", ")))
		}
	}
	if len(names) > 10 {
		names = append(names[:10], fmt.Sprintf("%d more", len(names)-10))
	}
	return problemf("publication %q also publishes %s, and the router stops at an insert into any table but %s: "+
		"run %s, or %s", cfg.Publication, strings.Join(names, ", "), outboxList(cfg), strings.Join(fixes, "; "), dedicated)
}

// checkColumnList refuses a column list (PostgreSQL 15+) without every column the router reads, naming
// SET TABLE with the publication's row filter kept.
func checkColumnList(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	ident := TableIdent(cfg.Table)
	var published []string
	var filter *string
	err := conn.QueryRow(ctx, `SELECT attnames::text[], rowfilter FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, cfg.Publication, ident[0], ident[1]).
		Scan(&published, &filter)
	if err != nil {
		return fmt.Errorf("read publication columns: %w", err)
	}
	var missing []string
	for _, name := range routerColumns(cfg) {
		if !slices.Contains(published, name) {
			missing = append(missing, name)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	sort.Strings(missing)
	where := ""
	if filter != nil {
		where = " WHERE (" + *filter + ")"
	}
	pub := pgx.Identifier{cfg.Publication}.Sanitize()
	fix := fmt.Sprintf("ALTER PUBLICATION %s SET TABLE %s%s", pub, ident.Sanitize(), where)
	if len(cfg.MoreTables) > 0 {
		// SET TABLE would drop the other outbox tables: replace this one alone, atomically.
		fix = fmt.Sprintf("BEGIN; ALTER PUBLICATION %[1]s DROP TABLE %[2]s; ALTER PUBLICATION %[1]s ADD TABLE %[2]s%[3]s; COMMIT;",
			pub, ident.Sanitize(), where)
	}
	return problemf("publication %q publishes only the columns %s of %s, so the router would never see %s: run "+
		"%s to publish every column", cfg.Publication, strings.Join(published, ", "),
		cfg.Table, strings.Join(missing, ", "), fix)
}

// wrapErr wraps a non-nil err with what was being done.
func wrapErr(doing string, err error) error {
	if err != nil {
		return fmt.Errorf("%s: %w", doing, err)
	}
	return nil
}
