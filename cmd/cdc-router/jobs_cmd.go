package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/admin"
	"github.com/cdc-router/cdc-router/snapshot"
)

const jobsUsage = `Usage: cdc-router jobs <subcommand> [flags] [NAME...]

Subcommands:
  list               every initial snapshot and backfill of this database: state, rows, times, error
  remove NAME...     forget finished, failed or interrupted backfills (NAME is backfill:<name> or <name>)

A job is interrupted when it is recorded as running but no process runs it (a kill, a crash, a stop); the
next run of the same backfill resumes it. A job that a process runs is never removed.

` + "`cdc-router jobs <subcommand> --help` lists the flags."

func runJobs(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	return runSubcommand(ctx, "jobs", jobsUsage, args, env, stdout, stderr, []subcommand{
		{"list", noArgs, jobsList}, {"remove", someNames, jobsRemove},
	})
}

func jobsList(s *settings) func(context.Context, *pgx.Conn, opsFlags, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, _ io.Writer) error {
		jobs, err := snapshot.NewJobs(conn, *pg.schema).All(ctx)
		if err != nil {
			return fmt.Errorf("read %s.snapshots (has `cdc-router migrate` run?): %w", *pg.schema, err)
		}
		w := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "NAME\tSTATE\tROWS\tSTARTED\tUPDATED\tPREDICATE\tERROR")
		for _, j := range jobs {
			fmt.Fprintf(w, "%s\t%s\t%d/%d\t%s\t%s\t%s\t%s\n", j.Name, shownState(j), j.RowsDone, j.RowsTotal,
				j.StartedAt.UTC().Format(time.RFC3339), j.UpdatedAt.UTC().Format(time.RFC3339), admin.OrDash(j.Predicate),
				admin.OrDash(admin.OneLine(j.Error, 200)))
		}
		return w.Flush()
	}
}

// shownState is running (a process runs it), interrupted, done or failed.
func shownState(j snapshot.Job) string {
	if j.Interrupted() {
		return "interrupted"
	}
	return j.State
}

func someNames(args []string) error {
	if len(args) == 0 {
		return errors.New("name at least one job (`cdc-router jobs list` shows them)")
	}
	return nil
}

func jobsRemove(s *settings) func(context.Context, *pgx.Conn, opsFlags, []string, io.Writer, io.Writer) error {
	return func(ctx context.Context, conn *pgx.Conn, pg opsFlags, args []string, stdout, stderr io.Writer) error {
		jobs := snapshot.NewJobs(conn, *pg.schema)
		var refused []string
		for _, name := range args {
			if !strings.Contains(name, ":") {
				name = snapshot.BackfillName(name)
			}
			ok, err := jobs.Remove(ctx, name)
			switch {
			case err != nil:
				fmt.Fprintf(stderr, "cdc-router jobs remove: %v\n", err)
				refused = append(refused, name)
			case !ok:
				fmt.Fprintf(stderr, "cdc-router jobs remove: no job %s in %s.snapshots\n", name, *pg.schema)
				refused = append(refused, name)
			default:
				fmt.Fprintf(stdout, "removed %s\n", name)
			}
		}
		if len(refused) > 0 {
			return fmt.Errorf("%d of %d jobs not removed (%s): see above", len(refused), len(args), strings.Join(refused, ", "))
		}
		return nil
	}
}
