package replication

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// restartWait begins the text of the wait between two stream runs: the backoff, already logged as it
// began ("stream stopped; restarting ..."), so watchWaits does not log it again, nor a slot's creation
// (pgserver.CreationWait), which pgserver.WatchCreation logs with the transactions it waits for.
const restartWait = "the restart after a "

// longWait is how long a start-up wait (a connection, the start-up checks) lasts before it is logged:
// a third of --pg-timeout, at most 10 s and at least 1 s. A server that does not answer ends the wait only at
// --pg-timeout, and until then the operator would see nothing in the log while /readyz says 503 (seed 7049
// of the harness: a start into a silent PostgreSQL, 32.6 s without a line).
func longWait(pgTimeout time.Duration) time.Duration {
	return min(max(pgTimeout/3, time.Second), 10*time.Second)
}

// watchWaits logs a warning when the router has waited for the same thing (stats.WaitFor) for after,
// then again at each doubling of the wait, and once for each wait on PostgreSQL that readiness reports
// (stats.WaitingOnPostgres), until ctx ends.
func watchWaits(ctx context.Context, log *slog.Logger, stats *metrics.Stats, after, pgTimeout time.Duration) {
	tick := time.NewTicker(min(after/4, time.Second))
	defer tick.Stop()
	var seen time.Time     // the start of the wait last logged
	var pgLogged time.Time // the start of the wait on PostgreSQL last logged
	next := after
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// A wait on PostgreSQL once readiness says so (the stream's on its ordinary connection, the initial
		// snapshot's silence probe): logged once per wait, as its 503 begins (seed 8106 of the harness: a
		// copy waited 30 s on a silent server with nothing in the log).
		if p := stats.WaitingOnPostgres(); p != "" {
			if since := stats.PostgresWaitSince(); !since.Equal(pgLogged) {
				pgLogged = since
				log.Warn(p)
			}
		}
		what, since := stats.WaitingOn()
		if what == "" || strings.HasPrefix(what, restartWait) || strings.HasPrefix(what, pgserver.CreationWait) {
			continue
		}
		if !since.Equal(seen) {
			seen, next = since, after
		}
		if waited := time.Since(since); waited >= next {
			args := []any{"waited", waited.Round(time.Second)}
			if strings.HasPrefix(what, "PostgreSQL") {
				args = append(args, "bound", "the attempt ends after --pg-timeout "+pgTimeout.String()+" and the router tries again")
			}
			log.Warn("still waiting for "+what, args...)
			next *= 2
		}
	}
}
