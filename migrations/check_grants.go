package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// routerTables are the router's own tables and the privileges the router role needs on each.
var routerTables = []struct {
	name   string
	rights []string
}{
	{"positions", []string{"SELECT", "INSERT", "UPDATE"}},
	{"snapshots", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
	{"quarantine", []string{"SELECT", "INSERT"}},
	{"publication_checks", []string{"SELECT", "INSERT", "UPDATE"}},
	{"schema_version", []string{"SELECT"}},
	{"routers", []string{"SELECT", "INSERT", "UPDATE", "DELETE"}},
}

// checkRouterSchema refuses a router schema that lacks a table, that predates the quarantine columns of
// 005 (a quarantine write would then fail at the first bad row) or the position marks of 010 and 017 or the refusal record of 018, or whose
// recorded version is not the one this binary knows (CheckSchemaVersion). It returns the tables' oids by name.
func checkRouterSchema(ctx context.Context, conn *pgx.Conn, cfg Config) (map[string]uint32, error) {
	oids := map[string]uint32{}
	var missing []string
	for _, t := range routerTables {
		oid, err := relation(ctx, conn, cfg.Schema, t.name)
		if err != nil {
			return nil, err
		}
		if oid == 0 {
			missing = append(missing, cfg.Schema+"."+t.name)
		}
		oids[t.name] = oid
	}
	if oids["positions"] == 0 {
		return nil, problemf("the router's table %s.positions does not exist: run `cdc-router migrate` first", cfg.Schema)
	}
	if err := newerVersion(ctx, conn, cfg.Schema); err != nil {
		return nil, err
	}
	if len(missing) > 0 {
		return nil, problemf("the router's schema lacks %s, which this version needs: run `cdc-router migrate`",
			strings.Join(missing, ", "))
	}
	var current bool
	err := conn.QueryRow(ctx, `SELECT count(*) = 4 FROM pg_attribute WHERE attrelid = $1 AND NOT attisdropped
		AND (attname IN ('event_id', 'value_notes', 'commit_time') OR (attname = 'row_values' AND NOT attnotnull))`,
		oids["quarantine"]).Scan(&current)
	if err != nil {
		return nil, fmt.Errorf("read quarantine columns: %w", err)
	}
	if !current {
		return nil, problemf("the router's table %s.quarantine predates this version (it lacks event_id, value_notes or commit_time, "+
			"or row_values is NOT NULL): run `cdc-router migrate`", cfg.Schema)
	}
	err = conn.QueryRow(ctx, `SELECT count(*) = 6 FROM pg_attribute WHERE attrelid = $1 AND NOT attisdropped
		AND attname IN ('mark_commit_lsn', 'mark_xid', 'mark_done', 'mark_config', 'mark_seen', 'mark_open')`,
		oids["positions"]).Scan(&current)
	if err != nil {
		return nil, fmt.Errorf("read positions columns: %w", err)
	}
	if !current {
		return nil, problemf("the router's table %s.positions predates this version (it lacks the mark columns of "+
			"migrations 010 and 017, which record progress inside a transaction): run `cdc-router migrate`", cfg.Schema)
	}
	err = conn.QueryRow(ctx, `SELECT count(*) = 10 FROM pg_attribute WHERE attrelid = $1 AND NOT attisdropped
		AND attname IN ('refusal_until', 'refusal_commit_lsn', 'refusal_lsn', 'refusal_ordinal', 'refusal_event_id',
			'refusal_strikes', 'refusal_first', 'refusal_last', 'refusal_reason', 'refusal_settles')`,
		oids["positions"]).Scan(&current)
	if err != nil {
		return nil, fmt.Errorf("read positions columns: %w", err)
	}
	if !current {
		return nil, problemf("the router's table %s.positions predates this version (it lacks the refusal columns of "+
			"migration 018, which keep the safety net's strikes with the slot): run `cdc-router migrate`", cfg.Schema)
	}
	return oids, nil
}

// checkGrants lists, in one Problem, every GRANT the current role lacks: USAGE on the router's schema, its
// rights on each router table and USAGE on the quarantine id sequence, and USAGE and SELECT on each outbox
// table (snapshots and backfills read it). It asks by oid, so a missing USAGE on a schema does not hide
// the rest.
func checkGrants(ctx context.Context, conn *pgx.Conn, cfg Config, role string, tables map[string]uint32) error {
	var grants []string
	add := func(grant string, err error) error {
		if grant != "" && !slices.Contains(grants, grant) {
			grants = append(grants, grant)
		}
		return err
	}
	if err := add(schemaGrant(ctx, conn, cfg.Schema)); err != nil {
		return err
	}
	for _, t := range routerTables {
		if err := add(tableGrant(ctx, conn, tables[t.name], t.rights, pgx.Identifier{cfg.Schema, t.name})); err != nil {
			return err
		}
		if t.name == "quarantine" {
			if err := add(sequenceGrant(ctx, conn, tables[t.name])); err != nil {
				return err
			}
		}
	}
	for _, t := range cfg.outboxes() {
		outbox := TableIdent(t.Table)
		outboxOID, err := relation(ctx, conn, outbox[0], outbox[1])
		if err != nil {
			return err
		}
		if err := add(schemaGrant(ctx, conn, outbox[0])); err != nil {
			return err
		}
		if err := add(tableGrant(ctx, conn, outboxOID, []string{"SELECT"}, outbox)); err != nil {
			return err
		}
	}
	if len(grants) == 0 {
		return nil
	}
	to := " TO " + pgx.Identifier{role}.Sanitize()
	return problemf("role %q lacks privileges the router needs: run %s as the owner of those objects "+
		"(docs/howto/set-up-the-database.md#database-role-and-access lists every grant)", role, strings.Join(grants, to+"; ")+to)
}

// schemaGrant is the GRANT of USAGE on schema when the current role lacks it, or "".
func schemaGrant(ctx context.Context, conn *pgx.Conn, schema string) (string, error) {
	var usage bool
	err := conn.QueryRow(ctx, `SELECT coalesce((SELECT has_schema_privilege(oid, 'USAGE') FROM pg_namespace
		WHERE nspname = $1), true)`, schema).Scan(&usage)
	if err != nil || usage {
		return "", wrapErr("read schema privileges", err)
	}
	return "GRANT USAGE ON SCHEMA " + pgx.Identifier{schema}.Sanitize(), nil
}

// tableGrant is the GRANT of the rights the current role lacks on the table with that oid, or "".
func tableGrant(ctx context.Context, conn *pgx.Conn, oid uint32, rights []string, name pgx.Identifier) (string, error) {
	var lacking []string
	err := conn.QueryRow(ctx, `SELECT ARRAY(SELECT r FROM unnest($2::text[]) WITH ORDINALITY AS x(r, i)
		WHERE NOT has_table_privilege($1::oid, r) ORDER BY i)`, oid, rights).Scan(&lacking)
	if err != nil {
		return "", fmt.Errorf("read privileges on %s: %w", name.Sanitize(), err)
	}
	if len(lacking) == 0 {
		return "", nil
	}
	return "GRANT " + strings.Join(lacking, ", ") + " ON " + name.Sanitize(), nil
}

// sequenceGrant is the GRANT of USAGE on the sequence of the table's id column when the current role can
// run nextval on it neither by USAGE nor by UPDATE, or "". It finds the sequence pg_get_serial_sequence
// names through pg_depend, because that function needs USAGE on the schema.
func sequenceGrant(ctx context.Context, conn *pgx.Conn, table uint32) (string, error) {
	var schema, name string
	var ok bool
	err := conn.QueryRow(ctx, `SELECT n.nspname, s.relname, has_sequence_privilege(s.oid, 'USAGE, UPDATE')
		FROM pg_depend d JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
		JOIN pg_namespace n ON n.oid = s.relnamespace
		JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
		WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
		  AND d.refobjid = $1 AND a.attname = 'id' AND d.deptype IN ('a', 'i')`, table).Scan(&schema, &name, &ok)
	if errors.Is(err, pgx.ErrNoRows) || ok {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read sequence privileges: %w", err)
	}
	return "GRANT USAGE ON SEQUENCE " + pgx.Identifier{schema, name}.Sanitize(), nil
}
