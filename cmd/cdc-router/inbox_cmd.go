package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
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
carries out (within runner.Config.RequestPoll, 1 s by default) and waits --wait for its outcome. A request
not taken within --wait expires: no runner ever carries it out, unless --leave-filed left it filed on
purpose for a runner that starts later. A runner refuses a resolve --parked whose event is no longer
parked or whose missing versions arrived since it was filed (outcome refused: nothing skipped).

Subcommands:
  list                 the unresolved failed events (id, time, event id, aggregate, version, reason,
                       attempts, detail) and the parked ones (event id, time, aggregate, version, applied
                       version, versions missing), oldest first (--limit)
  retry ID...          process each failed event again (RetryFailed); with --parked, each parked EVENT_ID
                       (RetryParked: applies it if its gap has closed)
  resolve ID...        mark each failed event handled without applying it (ResolveFailed, --note); with
                       --parked, give up the versions missing before each parked EVENT_ID and apply it
                       and those after it (ResolveParked)
  requests             the filed requests, newest first (--limit): id, filed at, by whom, what, target,
                       state (waiting, taken, done, cancelled, expired) and outcome
  cancel REQUEST_ID... withdraw waiting (or expired) requests so that no runner carries them out; a
                       request already carried out is refused, naming its outcome

Exit status: 0 when every request was carried out without an error (or left filed with --leave-filed, or
cancelled), 1 when one failed, was refused, or expired without a runner taking it within --wait (it is not
carried out later), 2 for a usage error.

` + "`cdc-router inbox <subcommand> --help` lists the flags."

// inboxFlags are the settings every inbox subcommand takes.
type inboxFlags struct {
	url, schema, consumer *string
}

// inboxCall is what an inbox subcommand runs with.
type inboxCall struct {
	admin  *inbox.Admin
	ids    []string // the positional arguments
	by     string   // the operator, as the environment names them ("" when unknown)
	stdout io.Writer
}

// operator names who runs the command, user@host, from USER or LOGNAME; "" when neither is set.
func operator(env func(string) string) string {
	who := env("USER")
	if who == "" {
		who = env("LOGNAME")
	}
	if who == "" {
		return ""
	}
	if host, err := os.Hostname(); err == nil && host != "" {
		who += "@" + host
	}
	return who
}

func runInbox(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		return usageError{errors.New("name a subcommand\n\n" + inboxUsage)}
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprintln(stdout, inboxUsage)
		return nil
	}
	subs := map[string]func(*settings) func(context.Context, inboxCall) error{
		"list": inboxList, "retry": inboxRequest("retry"), "resolve": inboxRequest("resolve"),
		"requests": inboxRequests, "cancel": inboxCancel,
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
	switch {
	case args[0] == "list" || args[0] == "requests":
		if err := noArgs(positional); err != nil {
			return usageError{fmt.Errorf("%s: %w", args[0], err)}
		}
	case args[0] == "cancel":
		if len(positional) == 0 {
			return usageError{errors.New("cancel: name at least one request ID (`cdc-router inbox requests` shows them)")}
		}
		for _, id := range positional {
			if n, err := strconv.ParseInt(id, 10, 64); err != nil || n <= 0 {
				return usageError{fmt.Errorf("cancel: %q is not a request ID: use the numbers in the ID column of "+
					"`cdc-router inbox requests`", id)}
			}
		}
	case len(positional) == 0:
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
	return run(ctx, inboxCall{admin: admin, ids: positional, by: operator(env), stdout: stdout})
}

func inboxList(s *settings) func(context.Context, inboxCall) error {
	limit := s.Int("limit", 50, "show at most this many failed and this many parked events, oldest first")
	return func(ctx context.Context, c inboxCall) error {
		a, stdout := c.admin, c.stdout
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
func inboxRequest(action string) func(*settings) func(context.Context, inboxCall) error {
	return func(s *settings) func(context.Context, inboxCall) error {
		parked := s.Bool("parked", false, "the IDs are event IDs of parked events, not failed record IDs")
		wait := s.Duration("wait", 30*time.Second, "how long to wait for a running consumer to carry out each request; "+
			"one not taken by then expires and is never carried out, unless --leave-filed")
		leave := s.Bool("leave-filed", false, "leave a request no consumer took within --wait filed, for a runner that "+
			"starts later to carry out (`cdc-router inbox cancel` withdraws it); with --wait 0, file it and return")
		var note *string
		if action == "resolve" {
			note = s.String("note", "", "why, kept with the failed record (logged for a parked event)")
		}
		return func(ctx context.Context, c inboxCall) error {
			ids := c.ids
			if *wait < 0 || (*wait == 0 && !*leave) {
				return usageError{fmt.Errorf("%s: --wait %v files a request nobody waits for: add --leave-filed to "+
					"leave it filed on purpose for a runner, or wait longer", action, *wait)}
			}
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
			r := inbox.Request{Action: action, Kind: kind, FiledBy: c.by}
			if note != nil {
				r.Note = *note
			}
			if !*leave {
				r.ExpireAfter = *wait
			}
			var errs []error
			for _, id := range ids {
				r.Target = id
				if err := fileAndAwait(ctx, c.admin, r, *wait, c.stdout); err != nil {
					errs = append(errs, err)
				}
			}
			return errors.Join(errs...)
		}
	}
}

// fileAndAwait files r, waits up to wait for its outcome and prints it in one line. A request no runner
// took within wait is expired (never carried out) unless r never expires (--leave-filed).
func fileAndAwait(ctx context.Context, a *inbox.Admin, r inbox.Request, wait time.Duration, stdout io.Writer) error {
	id, err := a.Request(ctx, r)
	if err != nil {
		return fmt.Errorf("%s %s %s: %w", r.Action, r.Kind, r.Target, err)
	}
	leftFiled := func() error {
		fmt.Fprintf(stdout, "%s %s: request %d left filed (--leave-filed), not carried out yet: a runner of this "+
			"consumer that starts carries it out; `cdc-router inbox requests` shows it, `cdc-router inbox cancel %d` "+
			"withdraws it\n", r.Kind, r.Target, id, id)
		return nil
	}
	if wait <= 0 {
		return leftFiled()
	}
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	st, err := a.Await(wctx, id, 200*time.Millisecond)
	if err == nil && !st.Done && !st.Taken && r.ExpireAfter > 0 {
		var expired bool
		if expired, err = a.Expire(context.WithoutCancel(ctx), id); err == nil && !expired {
			st, err = a.State(context.WithoutCancel(ctx), id) // taken at the last moment, or cancelled
		}
	}
	switch {
	case err != nil:
		return err
	case st.State == inbox.RequestCancelled:
		return fmt.Errorf("%s %s: request %d was cancelled (`cdc-router inbox cancel`) before a runner took it", r.Kind, r.Target, id)
	case !st.Done && st.Taken:
		return fmt.Errorf("%s %s: request %d was taken by a consumer but not answered within %v: it may still "+
			"be running, or the consumer stopped; see `cdc-router inbox requests` and the consumer's log", r.Kind, r.Target, id, wait)
	case !st.Done && r.ExpireAfter == 0:
		return leftFiled()
	case !st.Done:
		return fmt.Errorf("%s %s: request %d was not carried out within %v: is an inbox runner (runner.Runner) of this consumer "+
			"running? The request has expired and will not be carried out later: file it again once a runner runs, or "+
			"add --leave-filed to leave it for a runner that starts later", r.Kind, r.Target, id, wait)
	case st.Outcome == inbox.OutcomeRefused:
		return fmt.Errorf("%s %s: refused (request %d): %s", r.Kind, r.Target, id, st.Error)
	case st.Outcome == "error":
		return fmt.Errorf("%s %s: %s", r.Kind, r.Target, st.Error)
	}
	fmt.Fprintf(stdout, "%s %s: %s (request %d)\n", r.Kind, r.Target, st.Outcome, id)
	return nil
}

// inboxRequests lists the consumer's filed requests, newest first.
func inboxRequests(s *settings) func(context.Context, inboxCall) error {
	limit := s.Int("limit", 50, "show at most this many requests, newest first")
	return func(ctx context.Context, c inboxCall) error {
		if *limit <= 0 {
			return usageError{fmt.Errorf("--limit %d: use 1 or more", *limit)}
		}
		list, err := c.admin.Requests(ctx, *limit)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.stdout, "requests: %d (newest first)\n", len(list))
		w := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tFILED AT\tFILED BY\tREQUEST\tTARGET\tSTATE\tOUTCOME")
		for _, r := range list {
			outcome := r.Outcome
			if r.Error != "" {
				outcome += ": " + r.Error
			}
			switch r.State {
			case inbox.RequestCancelled:
				outcome = "by " + r.CancelledBy
			case inbox.RequestExpired:
				outcome = "not carried out: no runner took it by " + r.ExpiresAt.UTC().Format(time.RFC3339)
			}
			fmt.Fprintf(w, "%d\t%s\t%s\t%s %s\t%s\t%s\t%s\n", r.ID, r.FiledAt.UTC().Format(time.RFC3339),
				admin.OrDash(r.FiledBy), r.Action, r.Kind, r.Target, r.State, admin.OrDash(admin.OneLine(outcome, 160)))
		}
		return w.Flush()
	}
}

// inboxCancel withdraws each request that no runner took, printing one line per ID.
func inboxCancel(*settings) func(context.Context, inboxCall) error {
	return func(ctx context.Context, c inboxCall) error {
		var errs []error
		for _, arg := range c.ids {
			id, _ := strconv.ParseInt(arg, 10, 64) // checked by runInbox
			was, err := c.admin.Cancel(ctx, id, c.by)
			switch {
			case err != nil:
				errs = append(errs, err)
			case was == inbox.RequestCancelled:
				fmt.Fprintf(c.stdout, "request %d: already cancelled\n", id)
			case was == inbox.RequestExpired:
				fmt.Fprintf(c.stdout, "request %d: cancelled (it had expired: no runner would have carried it out)\n", id)
			default:
				fmt.Fprintf(c.stdout, "request %d: cancelled, no runner will carry it out\n", id)
			}
		}
		return errors.Join(errs...)
	}
}
