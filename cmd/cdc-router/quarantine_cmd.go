package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/admin"
	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/quarantine"
	"github.com/cdc-router/cdc-router/route"
	"github.com/cdc-router/cdc-router/route/message"
)

const quarantineUsage = `Usage: cdc-router quarantine <subcommand> [flags] [ID...]

Subcommands:
  list               the records, newest first: id, time, slot, event id, handled, reason (--limit, --open)
  show ID            one record: position, key, reason, the stored values and their notes
  replay ID...       publish each row again (header x-replayed: true) and mark it handled (--force: again;
                     --config FILE for a row of a mapped table, as run reads it)
  discard ID...      mark each record handled without publishing
  purge              delete records handled more than --handled-before ago (default 720h)

` + "`cdc-router quarantine <subcommand> --help` lists the flags."

// subcommand is one of the quarantine or jobs subcommands: its flags are added to s, args checks the
// positional arguments before anything connects, then run is called with them.
type subcommand struct {
	name string
	args func([]string) error
	bind func(s *settings) func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, stderr io.Writer) error
}

// opsFlags are the PostgreSQL settings of the operator commands.
type opsFlags struct {
	url, schema, table *string
}

func runQuarantine(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	return runSubcommand(ctx, "quarantine", quarantineUsage, args, env, stdout, stderr, []subcommand{
		{"list", noArgs, quarantineList}, {"show", oneID, quarantineShow}, {"replay", someIDs, quarantineReplay},
		{"discard", someIDs, quarantineDiscard}, {"purge", noArgs, quarantinePurge},
	})
}

// runSubcommand dispatches args[0] among subs; the flags may come before, between or after the IDs.
func runSubcommand(ctx context.Context, name, usageText string, args []string, env func(string) string,
	stdout, stderr io.Writer, subs []subcommand) error {
	if len(args) == 0 {
		return usageError{errors.New("name a subcommand\n\n" + usageText)}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, usageText)
		return flag.ErrHelp
	}
	for _, sub := range subs {
		if sub.name != args[0] {
			continue
		}
		s := newSettings(name+" "+sub.name, env, stderr)
		pg := opsFlags{
			url:    s.String("pg-url", "", "PostgreSQL URL, postgres://user:password@host:5432/db"),
			schema: s.String("schema", "cdc_router", "schema of the router's own tables"),
			table:  s.String("table", "public.outbox", "outbox table, schema.table"),
		}
		run := sub.bind(s)
		flags, positional := splitArgs(s.fs, args[1:])
		if err := parse(s, flags); err != nil {
			return err
		}
		if err := sub.args(positional); err != nil {
			return usageError{fmt.Errorf("%s: %w", sub.name, err)}
		}
		if *pg.url == "" {
			return usageError{errors.New("no PostgreSQL URL: set --pg-url or CDC_ROUTER_PG_URL (postgres://user:password@host:5432/db)")}
		}
		conn, err := pgserver.ConnectSQL(ctx, *pg.url)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		if err := migrations.CheckSchemaVersion(ctx, conn, *pg.schema); err != nil {
			return err
		}
		return run(ctx, conn, pg, positional, stdout, stderr)
	}
	return usageError{fmt.Errorf("unknown subcommand %q\n\n%s", args[0], usageText)}
}

// splitArgs separates the flags (with the values of the flags that take one) from the positional
// arguments, so that `show 7 --pg-url …` and `show --pg-url … 7` both work. After "--" all are positional.
func splitArgs(fs *flag.FlagSet, args []string) (flags, positional []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return flags, append(positional, args[i+1:]...)
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			positional = append(positional, a)
			continue
		}
		flags = append(flags, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		f := fs.Lookup(name)
		if f == nil {
			continue
		}
		if b, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && b.IsBoolFlag() {
			continue
		}
		if i+1 < len(args) {
			flags = append(flags, args[i+1])
			i++
		}
	}
	return flags, positional
}

func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("unexpected argument %q: this subcommand takes only flags", args[0])
	}
	return nil
}

func oneID(args []string) error {
	if len(args) != 1 {
		return errors.New("name exactly one record ID")
	}
	_, err := recordIDs(args)
	return err
}

func someIDs(args []string) error {
	_, err := recordIDs(args)
	return err
}

// recordIDs parses the IDs; at least one is required.
func recordIDs(args []string) ([]int64, error) {
	if len(args) == 0 {
		return nil, errors.New("name at least one record ID (`cdc-router quarantine list` shows them)")
	}
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not a record ID: use the numbers in the id column of `cdc-router quarantine list`", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

func quarantineList(s *settings) func(context.Context, *pgx.Conn, opsFlags, []string, io.Writer, io.Writer) error {
	limit := s.Int("limit", 50, "show at most this many records, newest first (0: all)")
	open := s.Bool("open", false, "only the records not handled yet")
	return func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, _ io.Writer) error {
		recs, err := quarantine.NewRecords(conn, *pg.schema).List(ctx, *limit, *open)
		if err != nil {
			return err
		}
		return admin.QuarantineList(stdout, recs)
	}
}

func quarantineShow(s *settings) func(context.Context, *pgx.Conn, opsFlags, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, _ io.Writer) error {
		ids, err := recordIDs(args)
		if err != nil {
			return err
		}
		r, ok, err := quarantine.NewRecords(conn, *pg.schema).Load(ctx, ids[0])
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("no quarantine record %d in %s.quarantine", ids[0], *pg.schema)
		}
		fmt.Fprint(stdout, admin.QuarantineRecord(r))
		return nil
	}
}

func quarantineReplay(s *settings) func(context.Context, *pgx.Conn, opsFlags, []string, io.Writer, io.Writer) error {
	broker := addBrokerFlags(s)
	force := s.Bool("force", false, "replay a record that was handled before (replayed or discarded) once more")
	timeout := s.Duration("confirm-timeout", route.DefaultConfirmTimeout, "how long to wait for RabbitMQ's confirm of each message")
	mappingFiles := s.Repeated("config", "", "the --config file run reads a mapped table with (its table= line names the table, else the records' table); by default the mapping that the records' router recorded, the flag repeated for several")
	return func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, stderr io.Writer) error {
		ids, err := recordIDs(args)
		if err != nil {
			return err
		}
		table, err := replayRouters(ctx, conn, s, *pg.schema, ids, broker)
		if err != nil {
			return err
		}
		if s.sources["table"] == sourceDefault && table.table != "" {
			*pg.table = table.table
		}
		mappings := table.mappings
		for _, path := range *mappingFiles {
			m, err := loadMapping(path, "")
			if err != nil {
				return err
			}
			table := m.Table
			if table == "" {
				table = decode.QualifiedTable(*pg.table)
			}
			mappings[table] = m
		}
		log, err := broker.logger(stderr)
		if err != nil {
			return err
		}
		read, err := pgserver.ConnectReader(ctx, *pg.url)
		if err != nil {
			return err
		}
		defer read.Close(context.Background())
		return admin.Replay{Records: quarantine.NewRecords(conn, *pg.schema), Read: read, Schema: *pg.schema, Table: *pg.table,
			Decode: broker.decode, Mappings: mappings, Force: *force, Timeout: *timeout, RefusalRetry: *broker.refusalRetry,
			Dial: func(ctx context.Context) (admin.ReplayPublisher, error) {
				r, err := route.Dial(ctx, broker.route(connectionName("cdc-router quarantine replay", table.slot)), log)
				if err != nil {
					return nil, err
				}
				return r, nil
			},
			Destination: func(ev cdc.Event) (string, string) { return message.Destination(ev, *broker.exchange) },
		}.Run(ctx, ids, stdout, stderr)
	}
}

func quarantineDiscard(s *settings) func(context.Context, *pgx.Conn, opsFlags, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, stderr io.Writer) error {
		ids, err := recordIDs(args)
		if err != nil {
			return err
		}
		return admin.QuarantineDiscard(ctx, quarantine.NewRecords(conn, *pg.schema), *pg.schema, ids, stdout, stderr)
	}
}

func quarantinePurge(s *settings) func(context.Context, *pgx.Conn, opsFlags, []string, io.Writer, io.Writer) error {
	age := s.Duration("handled-before", 30*24*time.Hour, "delete the records handled (replayed or discarded) more than this long ago")
	return func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, _ io.Writer) error {
		if *age < 0 {
			return usageError{errors.New("--handled-before must not be negative")}
		}
		n, err := quarantine.NewRecords(conn, *pg.schema).Purge(ctx, time.Now().Add(-*age))
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "purged %d records handled more than %v ago; records not handled are kept\n", n, *age)
		return nil
	}
}
