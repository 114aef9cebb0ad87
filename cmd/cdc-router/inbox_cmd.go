package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/cdc-router/cdc-router/admin"
	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/pgserver"
)

const inboxUsage = `Usage: cdc-router inbox <subcommand> --consumer NAME [flags] [ID...]

The consumer side: the failed and parked events of one consumer of the inbox package, in the database
of its projection (--pg-url). Retrying or resolving runs the consumer's handler, which only the consumer
has: the command files a request that a running runner.Runner (package inbox/runner) of that consumer
carries out (within runner.Config.RequestPoll, 1 s by default) and waits --wait for its outcome.

Subcommands:
  list                 the unresolved failed events (id, time, event id, aggregate, version, reason,
                       attempts, detail) and the parked ones (event id, time, aggregate, version, applied
                       version, versions missing), oldest first (--limit)
  retry ID...          process each failed event again (RetryFailed); with --parked, each parked EVENT_ID
                       (RetryParked: applies it if its gap has closed)
  resolve ID...        mark each failed event handled without applying it (ResolveFailed, --note); with
                       --parked, give up the versions missing before each parked EVENT_ID and apply it
                       and those after it (ResolveParked)

Exit status: 0 when every request was carried out without an error, 1 when one failed or was not carried
out within --wait (it stays filed: a consumer that starts later carries it out), 2 for a usage error.

` + "`cdc-router inbox <subcommand> --help` lists the flags."

// inboxFlags are the settings every inbox subcommand takes.
type inboxFlags struct {
	url, schema, consumer *string
}

func runInbox(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("name a subcommand\n\n" + inboxUsage)}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, inboxUsage)
		return nil
	}
	subs := map[string]func(*settings) func(context.Context, *inbox.Admin, []string, io.Writer) error{
		"list": inboxList, "retry": inboxRequest("retry"), "resolve": inboxRequest("resolve"),
	}
	bind, ok := subs[args[0]]
	if !ok {
		return usageError{fmt.Errorf("unknown subcommand %q\n\n%s", args[0], inboxUsage)}
	}
	s := newFileless("inbox "+args[0], env, stderr)
	f := inboxFlags{
		url:      s.String("pg-url", "", "PostgreSQL URL of the projection's database, which holds its inbox tables"),
		schema:   s.String("inbox-schema", inbox.DefaultSchema, "schema of the inbox tables (inbox.Config.Schema)"),
		consumer: s.String("consumer", "", "the consumer's name (inbox.Config.Consumer); required"),
	}
	run := bind(s)
	flags, positional := splitArgs(s.fs, args[1:])
	if err := parse(s, flags); err != nil {
		return err
	}
	if args[0] == "list" {
		if err := noArgs(positional); err != nil {
			return usageError{fmt.Errorf("list: %w", err)}
		}
	} else if len(positional) == 0 {
		return usageError{fmt.Errorf("%s: name at least one failed record ID, or with --parked an event ID "+
			"(`cdc-router inbox list` shows them)", args[0])}
	}
	switch {
	case *f.url == "":
		return usageError{errors.New("no PostgreSQL URL: set --pg-url or CDC_ROUTER_PG_URL to the projection's database")}
	case *f.consumer == "":
		return usageError{errors.New("no consumer: set --consumer to the name the consumer passes as inbox.Config.Consumer")}
	}
	conn, err := pgserver.ConnectSQL(ctx, *f.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	admin, err := inbox.NewAdmin(ctx, conn, inbox.Config{Consumer: *f.consumer, Schema: *f.schema})
	if err != nil {
		return err
	}
	return run(ctx, admin, positional, stdout)
}

func inboxList(s *settings) func(context.Context, *inbox.Admin, []string, io.Writer) error {
	limit := s.Int("limit", 50, "show at most this many failed and this many parked events, oldest first")
	return func(ctx context.Context, a *inbox.Admin, _ []string, stdout io.Writer) error {
		if *limit <= 0 {
			return usageError{fmt.Errorf("--limit %d: use 1 or more", *limit)}
		}
		failed, err := a.FailedEvents(ctx, *limit)
		if err != nil {
			return err
		}
		parked, err := a.ParkedEvents(ctx, *limit)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "failed events, unresolved: %d\n", len(failed))
		w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tFAILED AT\tEVENT ID\tAGGREGATE\tVERSION\tREASON\tATTEMPTS\tDETAIL")
		for _, f := range failed {
			ev := f.Event
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%d\t%s\n", f.ID, f.LastFailedAt.UTC().Format(time.RFC3339),
				admin.OrDash(ev.ID), admin.OrDash(aggregate(ev)), ev.AggregateVersion, f.Reason, f.Attempts, admin.OneLine(f.Detail, 120))
		}
		if err := w.Flush(); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nparked events: %d\n", len(parked))
		w = tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "EVENT ID\tPARKED AT\tAGGREGATE\tVERSION\tAPPLIED\tMISSING")
		for _, p := range parked {
			ev := p.Event
			fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%d\t%d\n", ev.ID, p.ParkedAt.UTC().Format(time.RFC3339), aggregate(ev),
				ev.AggregateVersion, p.Applied, p.Missing())
		}
		return w.Flush()
	}
}

// aggregate names an event's aggregate as type/id, "" when it has neither.
func aggregate(ev inbox.Event) string {
	if ev.AggregateType == "" && ev.AggregateID == "" {
		return ""
	}
	return ev.AggregateType + "/" + ev.AggregateID
}

// inboxRequest files one request per ID and waits for each, printing one line per ID.
func inboxRequest(action string) func(*settings) func(context.Context, *inbox.Admin, []string, io.Writer) error {
	return func(s *settings) func(context.Context, *inbox.Admin, []string, io.Writer) error {
		parked := s.Bool("parked", false, "the IDs are event IDs of parked events, not failed record IDs")
		wait := s.Duration("wait", 30*time.Second, "how long to wait for a running consumer to carry out each request (0: file it and return)")
		var note *string
		if action == "resolve" {
			note = s.String("note", "", "why, kept with the failed record (logged for a parked event)")
		}
		return func(ctx context.Context, a *inbox.Admin, ids []string, stdout io.Writer) error {
			kind := "failed"
			if *parked {
				kind = "parked"
			} else {
				for _, id := range ids {
					if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
						return usageError{fmt.Errorf("%s: %q is not a failed record ID: use the numbers in the ID column of "+
							"`cdc-router inbox list`, or --parked for an event ID", action, id)}
					}
				}
			}
			r := inbox.Request{Action: action, Kind: kind}
			if note != nil {
				r.Note = *note
			}
			var errs []error
			for _, id := range ids {
				r.Target = id
				if err := fileAndAwait(ctx, a, r, *wait, stdout); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}
	}
}

// fileAndAwait files r, waits up to wait for its outcome and prints it in one line.
func fileAndAwait(ctx context.Context, a *inbox.Admin, r inbox.Request, wait time.Duration, stdout io.Writer) error {
	id, err := a.Request(ctx, r)
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", r.Action, r.Kind, r.Target, err)
	}
	if wait <= 0 {
		fmt.Fprintf(stdout, "%s %s: request %d filed\n", r.Kind, r.Target, id)
		return nil
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	st, err := a.Await(wctx, id, 200*time.Millisecond)
	switch {
	case err != nil:
		return err
	case !st.Done && st.Taken:
		return fmt.Errorf("%s %s: request %d was taken by a consumer but not answered within %v: it may still "+
			"be running, or the consumer stopped; see `cdc-router inbox list` and the consumer's log", r.Kind, r.Target, id, wait)
	case !st.Done:
		return fmt.Errorf("%s %s: request %d was not carried out within %v: is an inbox runner (runner.Runner) of this consumer "+
			"running? It stays filed and a Runner that starts carries it out", r.Kind, r.Target, id, wait)
	case st.Outcome == "error":
		return fmt.Errorf("%s %s: %s", r.Kind, r.Target, st.Error)
	}
	fmt.Fprintf(stdout, "%s %s: %s (request %d)\n", r.Kind, r.Target, st.Outcome, id)
	return nil
}
