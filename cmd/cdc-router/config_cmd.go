package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/cdc-router/cdc-router/replication"
	"github.com/cdc-router/cdc-router/route"
)

const configUsage = `Usage: cdc-router config <subcommand>

Subcommands:
  check FILE [flags]  read FILE as run reads it (CDC_ROUTER_* and flags over it), check every setting, then
                      PostgreSQL (tables, mappings, publication, the router's schema and grants, the
                      replication connection) and RabbitMQ (the exchanges), without running or creating anything
  keys                every key of a configuration file: its flag, environment variable, default and meaning
                      (--markdown: as the table of docs/configuration.md)
`

func runConfig(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("name a subcommand\n\n" + configUsage)}
	}
	switch args[0] {
	case "-h", "--help", "help":
		fmt.Fprint(stdout, configUsage)
		return flag.ErrHelp
	case "check":
		return configCheck(ctx, args[1:], env, stdout, stderr)
	case "keys":
		s := newFileless("config keys", env, stderr)
		markdown := s.Bool("markdown", false, "print a Markdown table")
		if err := parse(s, args[1:]); err != nil {
			return err
		}
		fmt.Fprint(stdout, configKeys(*markdown))
		return nil
	}
	return usageError{fmt.Errorf("unknown subcommand %q\n\n%s", args[0], configUsage)}
}

// configCheck is `config check FILE`: run's settings from FILE, checked as run checks them at start.
func configCheck(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	s := newSettings("config check", env, stderr)
	f := addRunFlags(s)
	flags, positional := splitArgs(s.fs, args)
	if len(positional) != 1 {
		return usageError{errors.New("name one configuration file: cdc-router config check FILE")}
	}
	if err := parse(s, append([]string{"--config-file", positional[0]}, flags...)); err != nil {
		return err
	}
	r, err := f.router(stderr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "settings: ok (slot %s, publication %s, tables %s)\n", r.cfg.Slot, r.cfg.Publication,
		strings.Join(*f.pg.tables, ", "))
	log, err := f.broker.logger(io.Discard)
	if err != nil {
		return err
	}
	if err := replication.Check(ctx, r.cfg, log); err != nil {
		return err
	}
	fmt.Fprintln(stdout, "PostgreSQL: ok (tables, mappings, publication, the router's schema and grants, the replication connection)")
	if err := route.NewDialer(r.rcfg, log).Probe(ctx); err != nil {
		return brokerError(err)
	}
	fmt.Fprintln(stdout, "RabbitMQ: ok (connected, the exchanges declared as run declares them)")
	return nil
}

// configKeys lists every key of a configuration file (run's flags) with its flag, environment variable,
// default and meaning.
func configKeys(markdown bool) string {
	s := newSettings("run", func(string) string { return "" }, io.Discard)
	addRunFlags(s)
	var b strings.Builder
	if markdown {
		b.WriteString("| key | flag | environment | default | meaning |\n|---|---|---|---|---|\n")
	}
	s.fs.VisitAll(func(fl *flag.Flag) {
		if fl.Name == "config-file" || fl.Name == "print-config" {
			return
		}
		meaning := strings.TrimSuffix(fl.Usage, " (env "+envName(fl.Name)+")")
		def := "`" + fl.DefValue + "`"
		switch {
		case s.lists[fl.Name] && fl.DefValue == "":
			def = "(none)"
		case s.lists[fl.Name]:
			def = "`[" + fl.DefValue + "]`"
		case fl.DefValue == "":
			def = "(none)"
		}
		if markdown {
			fmt.Fprintf(&b, "| `%s` | `--%s` | `%s` | %s | %s |\n", fileKey(fl.Name), fl.Name, envName(fl.Name), def,
				strings.ReplaceAll(meaning, "|", "\\|"))
			return
		}
		fmt.Fprintf(&b, "%s (--%s, %s; default %s)\n    %s\n", fileKey(fl.Name), fl.Name, envName(fl.Name), strings.Trim(def, "`"), meaning)
	})
	return b.String()
}
