package e2e

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// stopTimeout is the --shutdown-timeout of the bounded-stop tests, stopMargin what the process may take
// past it (the runtime's exit, the signal's delivery).
const (
	stopTimeout = 2 * time.Second
	stopMargin  = time.Second
)

// pgProxy is a proxy in front of the suite's PostgreSQL and the env's URL through it.
func (e *env) pgProxy() (*testenv.Proxy, string) {
	e.t.Helper()
	direct := fmt.Sprintf("127.0.0.1:%d", pg.Port)
	p := testenv.NewProxy(e.t, direct)
	return p, strings.Replace(e.pgURL, direct, p.Addr, 1)
}

// startVia is start with the router's PostgreSQL URL replaced by pgURL (a proxy's) and amqpURL ("" for
// the env's).
func (e *env) startVia(pgURL, amqpURL string, flags ...string) *router {
	e.t.Helper()
	direct := e.pgURL
	e.pgURL = pgURL
	defer func() { e.pgURL = direct }()
	return e.start(amqpURL, flags...)
}

// stopWithin signals r with SIGTERM and fails the test unless it exits 0 within stopTimeout + stopMargin.
func stopWithin(t *testing.T, r *router, what string) time.Duration {
	t.Helper()
	signalled := time.Now()
	r.signal(syscall.SIGTERM)
	code := r.wait(stopTimeout + 30*time.Second)
	took := r.ExitAt.Sub(signalled)
	t.Logf("%s: SIGTERM with --shutdown-timeout %v: exit %d after %v", what, stopTimeout, code, took.Round(time.Millisecond))
	if took > stopTimeout+stopMargin {
		t.Errorf("%s: the stop took %v, want at most --shutdown-timeout %v + %v", what, took.Round(time.Millisecond),
			stopTimeout, stopMargin)
	}
	if code != 0 {
		t.Errorf("%s: exit %d after SIGTERM, want 0:\n%s", what, code, tail(r.Output(), 10))
	}
	return took
}

// snapshotRowsDone is the rows the initial snapshot stored as done.
func (e *env) snapshotRowsDone() int64 {
	var done int64
	fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots`), &done)
	return done
}

// TestShutdownTimeoutBoundsAStopDuringTheSnapshot stops a router in the middle of its initial snapshot
// while the broker stalls (confirms stop: the publish window fills) and while PostgreSQL stalls (the page
// query, the progress store and the closes get no answer), each through the test proxy. SIGTERM must end
// the process within --shutdown-timeout plus a second, and the next start finishes the snapshot: every
// row delivered at least once, first deliveries in order per aggregate.
func TestShutdownTimeoutBoundsAStopDuringTheSnapshot(t *testing.T) {
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	for _, stall := range []string{"broker", "postgres"} {
		t.Run(stall, func(t *testing.T) {
			e := newStreamEnv(t)
			c := e.consume(e.queue)
			w := newWriter(t, e.pgURL, 50)
			w.prefill(8000, "")
			pgp, pgURL := e.pgProxy()
			amqpp := testenv.NewProxy(t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
			// Small pages and window: the copy is still in its first pages when it stalls.
			r := e.startVia(pgURL, "amqp://guest:guest@"+amqpp.Addr+"/", "--shutdown-timeout", stopTimeout.String(),
				"--window", "64", "--lanes", "2")
			deadline := time.Now().Add(60 * time.Second)
			for len(c.snapshot()) < 1000 && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if len(c.snapshot()) < 1000 {
				t.Fatalf("the initial snapshot delivered %d rows in 60 s", len(c.snapshot()))
			}
			if stall == "broker" {
				amqpp.Pause()
			} else {
				pgp.Pause()
			}
			time.Sleep(time.Second) // the copy runs into the stall
			stopWithin(t, r, "stalled "+stall+" during the initial snapshot")
			pgp.Cut()
			amqpp.Cut()
			stored := e.snapshotRowsDone()
			first := settled(c)
			e.startStreaming()
			expectEveryEventInOrder(t, c, w, fmt.Sprintf("restart after the stop (%d rows stored done, %d delivered)", stored, first),
				120*time.Second)
		})
	}
}

// TestStopBoundsPostgreSQLWaits stops a router while it waits on PostgreSQL: slot creation waiting for a
// transaction that was running when it began, a quarantine record waiting for a lock on the quarantine
// table (written after the restart), and a PostgreSQL that accepts TCP but no longer answers (the proxy
// stops forwarding), while streaming, while starting and between restarts. Each SIGTERM must end the
// process within --shutdown-timeout plus a second.
func TestStopBoundsPostgreSQLWaits(t *testing.T) {
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	t.Run("slot creation waits for a transaction", func(t *testing.T) {
		e := newStreamEnv(t)
		ctx := context.Background()
		holder, err := pgx.Connect(ctx, e.pgURL) // e.db reads pg_stat_activity, whose view is fixed per transaction
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close(ctx)
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `INSERT INTO other (note) VALUES ('open')`); err != nil { // takes an xid
			t.Fatal(err)
		}
		r := e.start("", "--shutdown-timeout", stopTimeout.String())
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && e.scalar(`SELECT count(*)::text FROM pg_stat_activity
			WHERE datname = current_database() AND backend_type = 'walsender' AND wait_event = 'transactionid'`) == "0" {
			time.Sleep(50 * time.Millisecond)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no walsender waits for a transaction: %s\n%s", e.scalar(`SELECT string_agg(backend_type || ' ' ||
				coalesce(wait_event_type, '-') || ' ' || coalesce(wait_event, '-') || ' ' || coalesce(datname, '-') || ' ' || left(coalesce(query, ''), 60), E'\n')
				FROM pg_stat_activity`), tail(r.Output(), 20))
		}
		time.Sleep(500 * time.Millisecond)
		stopWithin(t, r, "slot creation waiting for a transaction")
		// The walsender ends with its client (a moment later): the half-made slot is gone while the
		// transaction still runs, and the next start is not kept standing by.
		deadline = time.Now().Add(2 * time.Second)
		for e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot) != "0" {
			if time.Now().After(deadline) {
				t.Fatalf("2 s after the stop the interrupted creation's slot is still there: %s", e.scalar(
					`SELECT active::text || ' ' || coalesce(active_pid::text, '-') FROM pg_replication_slots WHERE slot_name = $1`, e.slot))
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("a quarantine record waits for a lock", func(t *testing.T) {
		e := newStreamEnv(t)
		r := e.startStreaming("--shutdown-timeout", stopTimeout.String(), "--max-payload-bytes", "100")
		ctx := context.Background()
		holder, err := pgx.Connect(ctx, e.pgURL)
		if err != nil {
			t.Fatal(err)
		}
		defer holder.Close(ctx)
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		if _, err := tx.Exec(ctx, `LOCK TABLE cdc_router.quarantine IN EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
			VALUES (gen_random_uuid(), 'order', 'big', 1, 'created', jsonb_build_object('x', repeat('a', 500)), '{}')`)
		deadline := time.Now().Add(20 * time.Second)
		for e.scalar(`SELECT count(*)::text FROM pg_stat_activity WHERE datname = current_database()
			AND wait_event_type = 'Lock' AND query LIKE 'INSERT INTO%quarantine%'`) == "0" {
			if time.Now().After(deadline) {
				t.Fatalf("the router's quarantine record does not wait for the lock:\n%s", tail(r.Output(), 20))
			}
			time.Sleep(50 * time.Millisecond)
		}
		stopWithin(t, r, "a quarantine record waiting for a lock")
		tx.Rollback(ctx)
		e.startStreaming("--max-payload-bytes", "100")
		deadline = time.Now().Add(20 * time.Second)
		for e.scalar(`SELECT count(*)::text FROM cdc_router.quarantine`) != "1" {
			if time.Now().After(deadline) {
				t.Fatal("the oversized row was not quarantined after the restart")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	t.Run("postgres unreachable while streaming", func(t *testing.T) {
		e := newStreamEnv(t)
		p, url := e.pgProxy()
		r := e.startVia(url, "", "--shutdown-timeout", stopTimeout.String(), "--pg-timeout", "30s")
		r.waitLog("msg=streaming ", 30*time.Second)
		p.Pause()
		time.Sleep(2 * time.Second)
		stopWithin(t, r, "PostgreSQL unreachable while streaming")
	})
	t.Run("postgres unreachable at start", func(t *testing.T) {
		e := newStreamEnv(t)
		p, url := e.pgProxy()
		p.Pause()
		r := e.startVia(url, "", "--shutdown-timeout", stopTimeout.String(), "--pg-timeout", "30s")
		time.Sleep(2 * time.Second)
		stopWithin(t, r, "PostgreSQL unreachable at start")
	})
	t.Run("postgres unreachable in the reconnect loop", func(t *testing.T) {
		e := newStreamEnv(t)
		p, url := e.pgProxy()
		r := e.startVia(url, "", "--shutdown-timeout", stopTimeout.String(), "--pg-timeout", "1s")
		r.waitLog("msg=streaming ", 30*time.Second)
		p.Pause()
		r.waitLog("stream stopped; restarting", 20*time.Second)
		time.Sleep(1500 * time.Millisecond)
		stopWithin(t, r, "PostgreSQL unreachable in the reconnect loop")
	})
}
