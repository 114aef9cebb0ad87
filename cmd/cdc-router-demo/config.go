package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// config is the demo's command line. Every flag can also be set as DEMO_<FLAG> (dashes become
// underscores); a flag given on the command line wins over the environment.
type config struct {
	pgURL, amqpURL, exchange, queue, table, slot string
	interval, duration, drain                    time.Duration
	count                                        int
	write, consume, localPostgres, deleteQueue   bool
}

func envName(flagName string) string {
	return "DEMO_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

func parseConfig(args []string, getenv func(string) string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("cdc-router-demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	str := func(p *string, name, def, text string) { fs.StringVar(p, name, def, text+" (env "+envName(name)+")") }
	boolean := func(p *bool, name, text string) { fs.BoolVar(p, name, false, text+" (env "+envName(name)+")") }
	dur := func(p *time.Duration, name string, def time.Duration, text string) {
		fs.DurationVar(p, name, def, text+" (env "+envName(name)+")")
	}
	boolean(&c.write, "write", "insert orders and their outbox rows")
	boolean(&c.consume, "consume", "bind a queue to the exchange and print every event")
	boolean(&c.localPostgres, "local-postgres", "start a throwaway PostgreSQL (wal_level=logical) instead of --pg-url, print its URL, remove it on exit")
	str(&c.pgURL, "pg-url", "", "PostgreSQL URL of the database the router reads, postgres://user:password@host:5432/db")
	str(&c.amqpURL, "amqp-url", "amqp://guest:guest@localhost:5672/", "RabbitMQ URL")
	str(&c.exchange, "exchange", "outbox", "exchange the router publishes to")
	str(&c.queue, "queue", "demo.events", "durable queue the consumer binds with '#'")
	str(&c.table, "table", "public.outbox", "outbox table, schema.table")
	str(&c.slot, "slot", "cdc_router", "the router's replication slot: the writer waits until it exists")
	dur(&c.interval, "interval", 500*time.Millisecond, "time between two orders")
	fs.IntVar(&c.count, "count", 0, "stop writing after this many events, 0 for no limit (env "+envName("count")+")")
	dur(&c.duration, "duration", 0, "stop writing after this long, 0 for no limit")
	dur(&c.drain, "drain", 15*time.Second, "with --write --consume: how long to wait for the last events after writing stops")
	boolean(&c.deleteQueue, "delete-queue", "delete the consumer's queue on exit")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected argument %q: every setting is a --flag", fs.Arg(0))
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if v := getenv(envName(f.Name)); v != "" && !given[f.Name] {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q is not a valid --%s value", envName(f.Name), v, f.Name))
			}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return c, err
	}
	return c, c.validate()
}

func (c config) validate() error {
	switch {
	case !c.write && !c.consume && !c.localPostgres:
		return errors.New("nothing to do: give --write, --consume and/or --local-postgres (--help lists every flag)")
	case c.write && c.pgURL == "" && !c.localPostgres:
		return errors.New("no PostgreSQL URL: set --pg-url or DEMO_PG_URL, or use --local-postgres")
	case c.interval <= 0:
		return errors.New("--interval must be positive, e.g. 500ms")
	case c.count < 0 || c.duration < 0 || c.drain < 0:
		return errors.New("--count, --duration and --drain cannot be negative")
	case len(strings.Split(c.table, ".")) > 2:
		return fmt.Errorf("--table %q: use table or schema.table", c.table)
	}
	return nil
}
