// Command cdc-router reads committed outbox inserts from a PostgreSQL logical replication slot, publishes
// each to RabbitMQ with publisher confirms, and acknowledges a position to PostgreSQL only after the broker
// confirmed every event up to it. This package wires and configures; it holds no business logic.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

type command struct {
	name  string
	brief string
	run   func(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error
	subs  []string // the subcommands, each with flags of its own
}

func commands() []command {
	return []command{
		{"migrate", "create the outbox table, the router's schema and the publication (idempotent)", runMigrate, nil},
		{"run", "stream outbox inserts to RabbitMQ until SIGINT/SIGTERM", runRun, nil},
		{"status", "show the slot, its lag, the stored position and quarantined rows; whether a stopped router's slot is caught up", runStatus, nil},
		{"backfill", "publish retained outbox rows again (x-backfill: true) while run keeps streaming", runBackfill, nil},
		{"reset", "forget the stored position and drop the slot, to start over after a refusal", runReset, nil},
		{"jobs", "list the snapshot and backfill jobs, or remove finished, failed or interrupted backfills", runJobs, []string{"list", "remove"}},
		{"quarantine", "list, show, replay, discard or purge quarantined rows", runQuarantine,
			[]string{"list", "show", "replay", "discard", "purge"}},
		{"inbox", "list a consumer's failed and parked events, or have its running Runner retry or resolve them", runInbox,
			[]string{"list", "retry", "resolve", "requests", "cancel"}},
		{"config", "check a configuration file against the database and the broker, or list its keys", runConfig, []string{"check", "keys"}},
		{"version", "print the version", runVersion, nil},
	}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	code := cliEnviron(ctx, os.Args[1:], os.Environ(), os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// cli runs one subcommand and returns the exit code: 0 success, 1 failure, 2 usage error.
func cli(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands() {
		if c.name != args[0] {
			continue
		}
		err := c.run(ctx, args[1:], env, stdout, stderr)
		var help helpRequest
		switch {
		case errors.As(err, &help):
			fmt.Fprint(stdout, help.text)
			return 0
		case err == nil, errors.Is(err, flag.ErrHelp):
			return 0
		case errors.As(err, new(usageError)):
			fmt.Fprintf(stderr, "cdc-router %s: %v\n", c.name, err)
			return 2
		default:
			fmt.Fprintf(stderr, "cdc-router %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "cdc-router: unknown command %q\n\n", args[0])
	usage(stderr)
	return 2
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "Usage: cdc-router <command> [flags]\n\nCommands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.brief)
	}
	fmt.Fprintln(w, "\nEvery setting of run is a key of a configuration file (--config-file FILE, `cdc-router config keys`), a "+
		"CDC_ROUTER_* environment variable and a flag, each overriding the one before; `cdc-router <command> --help` lists a command's flags.")
}

// usageError marks a bad command line (exit code 2).
type usageError struct{ error }

// helpRequest is --help (and --print-config): cli prints text to stdout and exits 0, so `cdc-router run
// --help | grep` works. It unwraps to flag.ErrHelp. flags are the names of the command's flags.
type helpRequest struct {
	text  string
	flags []string
}

func (h helpRequest) Error() string { return flag.ErrHelp.Error() }
func (h helpRequest) Unwrap() error { return flag.ErrHelp }

// newSettings makes a command's flag set. The flag package's own output (the flag list for --help, and the
// flag list it adds to a parse error) is captured: parse returns the list for --help, and cli prints a parse
// error as one line with a pointer to --help. stderr is kept for the commands' signature.
func newSettings(name string, env func(string) string, stderr io.Writer) *settings {
	s := newFileless(name, env, stderr)
	s.fileKeys = runKeys
	s.configFile = s.String("config-file", "", "read the settings from this YAML file, one key per setting of run (cdc-router config keys lists them); "+
		"the environment and the command line override it")
	s.print = s.Bool("print-config", false, "print the effective settings as a configuration file (passwords masked, each with where it came from) and exit")
	return s
}

// newFileless makes the flag set of a command that reads no configuration file (inbox: its database is a
// consumer's, not a router's).
func newFileless(name string, env func(string) string, _ io.Writer) *settings {
	fs := flag.NewFlagSet("cdc-router "+name, flag.ContinueOnError)
	s := &settings{fs: fs, getenv: env, kinds: map[string]string{}, lists: map[string]bool{}, sources: map[string]string{}}
	fs.SetOutput(&s.flagOutput)
	return s
}

// runKeys are the keys a configuration file may hold: run's flags.
func runKeys() []string {
	s := newSettings("run", func(string) string { return "" }, io.Discard)
	addRunFlags(s)
	var keys []string
	s.fs.VisitAll(func(f *flag.Flag) {
		if f.Name != "config-file" && f.Name != "print-config" {
			keys = append(keys, f.Name)
		}
	})
	return keys
}

func parse(s *settings, args []string) error {
	if err := s.parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return helpRequest{text: s.flagOutput.String(), flags: s.names()}
		}
		return usageError{err}
	}
	if s.print != nil && *s.print {
		return helpRequest{text: s.printConfig()}
	}
	return nil
}

func newLogger(w io.Writer, level, format string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("log level %q: use debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: l, ReplaceAttr: durationText}
	switch strings.ToLower(format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("log format %q: use text or json", format)}
}

// durationText writes every duration attribute in one form, Go's duration text ("1.5s", "250ms"): the JSON
// handler would otherwise write integer nanoseconds for a time.Duration next to the strings of others.
func durationText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		a.Value = slog.StringValue(a.Value.Duration().String())
	}
	return a
}

func runVersion(_ context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	s := newFileless("version", env, stderr)
	if err := parse(s, args); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "cdc-router", version)
	return nil
}
