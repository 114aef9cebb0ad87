package migrations

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
	"text/template"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
)

//go:embed sql/*.sql sql/partitioned/*.sql
var files embed.FS

// Config names the objects the migrations create.
type Config struct {
	Table       string // outbox table, "schema.table" or "table" (public); default public.outbox
	Publication string // publication name; default cdc_router_outbox
	Schema      string // the router's own schema; default cdc_router
	// Partitioned creates the outbox range-partitioned by occurred_at (sql/partitioned replaces the file of
	// the same name), with the partitions of the current PartitionInterval and the next PartitionsAhead, and a
	// default partition; run again, it adds the partitions that are missing. It refuses an existing outbox
	// that is not partitioned.
	Partitioned       bool
	PartitionInterval string // day, week or month (default); UTC
	PartitionsAhead   int    // partitions after the current one (the migrate command's default is 3)
	// EmitFunction also creates <Schema>.emit(…), which writes an event as a logical decoding message with
	// MessagePrefix (migrate --emit-function); off by default.
	EmitFunction  bool
	MessagePrefix string // prefix of the messages emit writes; default DefaultMessagePrefix
	// EmitRoles are granted EXECUTE on emit (migrate --emit-role), which is revoked from PUBLIC; roles granted
	// by an earlier run keep it. RotateEmitKey adds a new signing key, which emit uses from then on (the
	// older keys stay, so that the messages they signed still verify).
	EmitRoles     []string
	RotateEmitKey bool
	// Mapping, when set (run --config), makes Check accept the outbox shape it reads instead of the native
	// one; nil checks the native shape.
	Mapping *decode.Mapping
	// MoreTables are the further outbox tables of a router that reads several (run --table a --table b): Check
	// checks each like Table (with its own Mapping) and wants all of them, and no other table, in the
	// publication. Apply and the shard functions ignore them.
	MoreTables []decode.Outbox
	// Notice, when set, receives Check's start-up lines about what it accepts but does not use (a column of
	// a mapped table that an option left at its default would name, of a type that option does not read).
	Notice func(msg string)
}

// outboxes is Table with its Mapping, then MoreTables: the tables Check checks, in that order.
func (c Config) outboxes() []decode.Outbox {
	return append([]decode.Outbox{{Table: c.Table, Mapping: c.Mapping}}, c.MoreTables...)
}

// forTable is c with Table and Mapping set to t's, for the checks that look at one table.
func (c Config) forTable(t decode.Outbox) Config {
	c.Table, c.Mapping = t.Table, t.Mapping
	return c
}

// EmitKeyDelay is how long after `migrate --rotate-emit-key` emit starts signing with the new key: long
// enough for every running router to have reloaded the keys (a stream reloads them every EmitKeyInterval at most).
const EmitKeyDelay = 2 * time.Minute

// DefaultMessagePrefix is the prefix of the messages that <schema>.emit writes when none is given.
const DefaultMessagePrefix = "cdc-router.outbox"

// Defaults fills empty fields with the documented defaults.
func (c Config) Defaults() Config {
	if c.Table == "" {
		c.Table = "public.outbox"
	}
	if c.Publication == "" {
		c.Publication = "cdc_router_outbox"
	}
	if c.Schema == "" {
		c.Schema = "cdc_router"
	}
	if c.MessagePrefix == "" {
		c.MessagePrefix = DefaultMessagePrefix
	}
	if c.PartitionInterval == "" {
		c.PartitionInterval = "month"
	}
	return c
}

// maxPartitionsAhead bounds PartitionsAhead: a few years of days.
const maxPartitionsAhead = 1000

// Validate refuses partition settings the migration cannot apply.
func (c Config) Validate() error {
	switch c.PartitionInterval {
	case "", "day", "week", "month":
	default:
		return problemf("--partition-interval is %q: use day, week or month", c.PartitionInterval)
	}
	if c.PartitionsAhead < 0 || c.PartitionsAhead > maxPartitionsAhead {
		return problemf("--partitions-ahead is %d: use 0 to %d", c.PartitionsAhead, maxPartitionsAhead)
	}
	return nil
}

// TableIdent splits a table name into its schema and name, defaulting the schema to public.
func TableIdent(table string) pgx.Identifier {
	if s, t, ok := strings.Cut(table, "."); ok {
		return pgx.Identifier{s, t}
	}
	return pgx.Identifier{"public", table}
}

type vars struct {
	Schema, Table, Publication                      string
	SchemaLiteral, PublicationLiteral, TableLiteral string // the names as SQL string literals (Table quoted)
	// Interval, IntervalLiteral and StepLiteral are the partition interval ("month", 'month', '1 month');
	// Ahead is how many partitions follow the current one (sql/partitioned only).
	Interval, IntervalLiteral, StepLiteral string
	Ahead                                  int
	EmitFunction                           bool   // render 007's emit function
	EmitRoles                              []role // the roles granted EXECUTE on emit
	RotateEmitKey                          bool   // add a new emit key
	EmitKeyDelay                           string // how long after a rotation the new key signs, an SQL interval literal
	EmitKeyGrace                           string // how long a retired key still verifies, an SQL interval literal
	MessagePrefixLiteral                   string // the emit function's message prefix as an SQL string literal
	// Dollar is the dollar-quote delimiter of DO bodies (write DO {{.Dollar}} ... {{.Dollar}}; never $$): $$
	// unless a name holds it, then one no name holds, so a name can never end the body early.
	Dollar string
}

// role is a role name as an SQL identifier and as a string literal.
type role struct{ Ident, Literal string }

// dollarTag is a dollar-quote delimiter that occurs in none of names.
func dollarTag(names ...string) string {
	tag := "$$"
	for i := 0; ; i++ {
		clash := false
		for _, n := range names {
			clash = clash || strings.Contains(n, tag)
		}
		if !clash {
			return tag
		}
		tag = fmt.Sprintf("$cdc_router_%d$", i)
	}
}

// literal quotes s as an SQL string literal (standard_conforming_strings is on from PostgreSQL 9.1).
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// Statements renders the embedded SQL files in order; with cfg.Partitioned a file of sql/partitioned
// replaces the file of sql/ with the same name.
func Statements(cfg Config) ([]string, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.Defaults()
	v := vars{
		Schema:               pgx.Identifier{cfg.Schema}.Sanitize(),
		Table:                TableIdent(cfg.Table).Sanitize(),
		Publication:          pgx.Identifier{cfg.Publication}.Sanitize(),
		SchemaLiteral:        literal(cfg.Schema),
		PublicationLiteral:   literal(cfg.Publication),
		TableLiteral:         literal(TableIdent(cfg.Table).Sanitize()),
		Interval:             cfg.PartitionInterval,
		IntervalLiteral:      literal(cfg.PartitionInterval),
		StepLiteral:          literal("1 " + cfg.PartitionInterval),
		Ahead:                cfg.PartitionsAhead,
		EmitFunction:         cfg.EmitFunction,
		MessagePrefixLiteral: literal(cfg.MessagePrefix),
		RotateEmitKey:        cfg.RotateEmitKey,
		EmitKeyDelay:         literal(fmt.Sprintf("%d seconds", int(EmitKeyDelay.Seconds()))),
		EmitKeyGrace:         literal(fmt.Sprintf("%d seconds", int(EmitKeyGrace.Seconds()))),
	}
	quoted := []string{v.Schema, v.Table, v.Publication, v.SchemaLiteral, v.PublicationLiteral, v.TableLiteral, v.MessagePrefixLiteral}
	for _, r := range cfg.EmitRoles {
		v.EmitRoles = append(v.EmitRoles, role{Ident: pgx.Identifier{r}.Sanitize(), Literal: literal(r)})
		quoted = append(quoted, r)
	}
	v.Dollar = dollarTag(quoted...)
	names, err := fs.Glob(files, "sql/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	if cfg.Partitioned {
		for i, name := range names {
			alt := path.Join("sql/partitioned", path.Base(name))
			if _, err := fs.Stat(files, alt); err == nil {
				names[i] = alt
			}
		}
	}
	out := make([]string, 0, len(names))
	for _, name := range names {
		text, err := files.ReadFile(name)
		if err != nil {
			return nil, err
		}
		tmpl, err := template.New(name).Parse(string(text))
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		var b bytes.Buffer
		if err := tmpl.Execute(&b, v); err != nil {
			return nil, fmt.Errorf("render %s: %w", name, err)
		}
		if strings.TrimSpace(b.String()) == "" { // an optional migration that is off
			continue
		}
		out = append(out, b.String())
	}
	return out, nil
}

// Apply runs every migration in one transaction, serialised by an advisory lock so that two routers
// starting at once do not race, and records SchemaVersion. It refuses a schema that a newer cdc-router
// migrated, before running anything.
func Apply(ctx context.Context, conn *pgx.Conn, cfg Config) error {
	stmts, err := Statements(cfg)
	if err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('cdc_router_migrate'))"); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	schema := cfg.Defaults().Schema
	if stored, err := storedVersion(ctx, tx, schema); err != nil {
		return err
	} else if stored > SchemaVersion() {
		return newerSchema(SchemaVersion(), stored)
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "P0001" { // a refusal the SQL raises, naming the fix
				return &Problem{Msg: pgErr.Message}
			}
			return fmt.Errorf("migrate: %w", err)
		}
	}
	if err := recordVersion(ctx, tx, schema); err != nil {
		return err
	}
	return tx.Commit(ctx)
}
