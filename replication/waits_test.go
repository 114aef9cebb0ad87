package replication

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// TestWatchWaitsLogsALongWait: a start-up wait is logged as a warning once it lasts the threshold, again at
// each doubling, and a new wait starts its own count; the restart's backoff (logged as it began), a slot's creation (pgserver.WatchCreation logs it) and a
// router that streams or stands by are not logged.
func TestWatchWaitsLogsALongWait(t *testing.T) {
	const after = 200 * time.Millisecond
	var out testenv.Buffer
	stats := &metrics.Stats{}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go watchWaits(ctx, slog.New(slog.NewTextHandler(&out, nil)), stats, after, 30*time.Second)
	count := func(s string) int { return strings.Count(out.String(), s) }

	within := func(what string, n int) time.Duration { // how long until n lines say what (the machine may be slow)
		began := time.Now()
		for count(what) < n {
			if time.Since(began) > 10*time.Second {
				t.Fatalf("%d lines %q after 10 s, want %d:\n%s", count(what), what, n, out.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		return time.Since(began)
	}

	stats.SetState(metrics.StateStarting, nil)
	began := time.Now()
	stats.WaitFor("PostgreSQL at h:5432 to accept the router's ordinary connection")
	time.Sleep(after / 2)
	if n := count("still waiting"); n != 0 {
		t.Fatalf("%d lines before the threshold:\n%s", n, out.String())
	}
	within(`level=WARN msg="still waiting for PostgreSQL at h:5432 to accept the router's ordinary connection"`, 2)
	if took := time.Since(began); took < 2*after {
		t.Errorf("two warnings after %v, want the second at twice the threshold (%v) or later", took, 2*after)
	}
	if !strings.Contains(out.String(), "--pg-timeout 30s") {
		t.Errorf("the line does not name the bound:\n%s", out.String())
	}
	stats.WaitFor("RabbitMQ to accept the router's connection")
	within(`msg="still waiting for RabbitMQ to accept the router's connection"`, 1)
	before := count("still waiting")
	stats.SetState(metrics.StateRestarting, nil)
	stats.WaitFor(restartWait + "postgres failure (backoff 5s)")
	time.Sleep(3 * after)
	stats.SetState(metrics.StateStarting, nil)
	stats.WaitFor(pgserver.CreationWait + "s (it waits until the transactions running when it began end)")
	time.Sleep(3 * after)
	stats.SetState(metrics.StateStandby, nil)
	stats.WaitFor("PostgreSQL at h:5432 to answer the start-up checks")
	time.Sleep(3 * after)
	if n := count("still waiting"); n != before {
		t.Errorf("the restart's backoff, the slot's creation or the standby was logged:\n%s", out.String())
	}
	// Seed 8106: a wait on PostgreSQL that readiness reports (here the initial snapshot's silence probe) is
	// logged once, whatever the state.
	stats.SetState(metrics.StateSnapshot, nil)
	stats.SetSilentAfter(2 * time.Second)
	stats.WaitOnPostgres("answer the initial snapshot's probe", time.Now().Add(-3*time.Second))
	within(`level=WARN msg="the stream has waited 3s for PostgreSQL to answer the initial snapshot's probe`, 1)
	time.Sleep(3 * after)
	if n := count("to answer the initial snapshot's probe"); n != 1 {
		t.Errorf("%d lines for one wait on PostgreSQL, want 1:\n%s", n, out.String())
	}
}
