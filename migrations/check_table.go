package migrations

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode/mapping"
)

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

// columnOrder is the order the migration creates the outbox columns in.
var columnOrder = []string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "event_type",
	"schema_version", "payload", "headers", "occurred_at"}

// expectedColumns lists every outbox column with the types the decoder accepts, for users who have no copy
// of the migration files (a binary or an image).
func expectedColumns() string {
	cols := make([]string, len(columnOrder))
	for i, name := range columnOrder {
		cols[i] = name + " " + strings.Join(columnTypes[name], "|")
	}
	return strings.Join(cols, ", ")
}

// keyColumns is the outbox key that snapshots page by, in order.
var keyColumns = []string{"aggregate_type", "aggregate_id", "aggregate_version"}

type outboxColumn struct {
	typ       string
	notNull   bool
	generated string // pg_attribute.attgenerated: "" (an ordinary column), "s" (stored) or "v" (virtual, PostgreSQL 18)
}

// relation returns the oid of the table schema.name, or 0 when there is none. It reads the catalog by
// name, so unlike to_regclass it needs no USAGE on the schema.
func relation(ctx context.Context, conn *pgx.Conn, schema, name string) (uint32, error) {
	var oid uint32
	err := conn.QueryRow(ctx, `SELECT coalesce((SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')), 0)`, schema, name).Scan(&oid)
	if err != nil {
		return 0, fmt.Errorf("look up %s.%s: %w", schema, name, err)
	}
	return oid, nil
}

func readColumns(ctx context.Context, conn *pgx.Conn, table uint32) (map[string]outboxColumn, error) {
	rows, err := conn.Query(ctx, `
		SELECT a.attname, t.typname, a.attnotnull, a.attgenerated::text
		FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid
		WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, table)
	if err != nil {
		return nil, fmt.Errorf("read outbox columns: %w", err)
	}
	have := map[string]outboxColumn{}
	var name string
	var c outboxColumn
	_, err = pgx.ForEachRow(rows, []any{&name, &c.typ, &c.notNull, &c.generated}, func() error {
		have[name] = c
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read outbox columns: %w", err)
	}
	return have, nil
}

func checkTable(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	ident := TableIdent(cfg.Table)
	table, err := relation(ctx, conn, ident[0], ident[1])
	if err != nil {
		return err
	}
	have, err := readColumns(ctx, conn, table)
	if err != nil {
		return err
	}
	if len(have) == 0 {
		return problemf("the outbox table %s does not exist: run `cdc-router migrate` to create it, or point "+
			"--table (CDC_ROUTER_TABLE) at yours", cfg.Table)
	}
	if err := checkGenerated(ctx, conn, cfg, have); err != nil {
		return err
	}
	if cfg.Mapping != nil {
		return checkMappedTable(cfg, have)
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
		case !slices.Contains(want, got.typ):
			bad = append(bad, fmt.Sprintf("column %s is %s, want %s", name, got.typ, strings.Join(want, " or ")))
		}
	}
	if len(bad) > 0 {
		mapIt := ""
		if _, ok := have["aggregate_type"]; !ok { // another shape (Debezium's: aggregatetype, aggregateid, type)
			mapIt = "to read it as it is, run with --config FILE, a Java-properties file of Debezium's outbox router " +
				"options naming its columns (docs/migrating-from-polling.md); or "
		}
		return problemf("the outbox table %s does not have the expected shape (%s): %salter it to have the columns "+
			"%s (`cdc-router migrate` creates such a table)", cfg.Table, strings.Join(bad, "; "), mapIt, expectedColumns())
	}
	part, err := readPartitionKey(ctx, conn, table)
	if err != nil {
		return err
	}
	if part.expression {
		return problemf("the outbox table %s is partitioned by an expression, so it can have no unique key for "+
			"snapshots to page by: partition it by a column, as `cdc-router migrate --partitioned` does "+
			"(PARTITION BY RANGE (occurred_at); docs/partitioning.md)", cfg.Table)
	}
	key := append(slices.Clone(keyColumns), part.extra()...)
	var nullable, fixes []string
	for _, name := range key {
		if !have[name].notNull {
			nullable = append(nullable, name)
			fixes = append(fixes, "ALTER COLUMN "+name+" SET NOT NULL")
		}
	}
	if len(nullable) > 0 {
		return problemf("the outbox table %s allows NULL in %s, but every event needs its key and snapshots page by "+
			"it: run ALTER TABLE %s %s (after fixing any row that holds a NULL)",
			cfg.Table, strings.Join(nullable, ", "), ident.Sanitize(), strings.Join(fixes, ", "))
	}
	if part.partitioned {
		return checkPartitionedKey(ctx, conn, cfg, table, key)
	}
	var keyed bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
		WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL
		  AND ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum ORDER BY k.ord)
		      = ARRAY['aggregate_type', 'aggregate_id', 'aggregate_version'])`, table).Scan(&keyed)
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

// checkMappedTable checks a table read through a --config mapping: every column an option names is
// present (unless optional) with a type the decoder reads; a column an option at its default would name,
// of another type, is left unused and reported to cfg.Notice. No key is required: a mapped table has no
// version, so the initial snapshot (which pages by the native key) is not offered for it.
func checkMappedTable(cfg Config, have map[string]outboxColumn) error {
	var bad []string
	for _, r := range cfg.Mapping.Columns() {
		got, ok := have[r.Column]
		switch {
		case !ok && r.Required:
			bad = append(bad, fmt.Sprintf("column %s named by %s is missing%s", r.Column, r.Option, mapping.CaseHint(r.Column, r.Option, slices.Sorted(maps.Keys(have)))))
		case ok && len(r.Types) > 0 && !slices.Contains(r.Types, got.typ) && r.IfTyped:
			if cfg.Notice != nil {
				cfg.Notice(r.Unused(cfg.Table, got.typ))
			}
		case ok && len(r.Types) > 0 && !slices.Contains(r.Types, got.typ):
			bad = append(bad, fmt.Sprintf("column %s named by %s is %s, want %s", r.Column, r.Option, got.typ, strings.Join(r.Types, " or ")))
		}
	}
	if len(bad) > 0 {
		return problemf("the outbox table %s does not fit the --config mapping (%s): correct the option in the --config "+
			"file, or the table", cfg.Table, strings.Join(bad, "; "))
	}
	return nil
}

// routerColumns is the columns the publication must carry: the native ones, or those the mapping requires
// (an optional mapped column, such as the type or tracing column, is used when it is published).
func routerColumns(cfg Config) []string {
	if cfg.Mapping == nil {
		return slices.Clone(columnOrder)
	}
	var out []string
	for _, r := range cfg.Mapping.Columns() {
		if r.Required && !slices.Contains(out, r.Column) {
			out = append(out, r.Column)
		}
	}
	return out
}
