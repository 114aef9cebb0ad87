package registry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/migrations"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// migrated is a new database migrated with the default schema: its URL and a connection to it.
func migrated(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := pg.NewDatabase(t)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	return url, c
}

func exec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// connector connects to url, as Keep's caller's pgserver.ConnectSQL does.
func connector(url string) func(context.Context) (*pgx.Conn, error) {
	return func(ctx context.Context) (*pgx.Conn, error) { return pgx.Connect(ctx, url) }
}

// roleState is a router's state that a test changes while Keep polls it.
type roleState struct {
	mu   sync.Mutex
	role string
	err  error
	pub  *Publishing
}

func (s *roleState) set(role string, err error) {
	s.mu.Lock()
	s.role, s.err = role, err
	s.mu.Unlock()
}
func (s *roleState) get() State {
	s.mu.Lock()
	defer s.mu.Unlock()
	return State{Role: s.role, Err: s.err, Publishing: s.pub}
}

func (s *roleState) publishing(p *Publishing) {
	s.mu.Lock()
	s.pub = p
	s.mu.Unlock()
}

// until polls cond every 50 ms for up to d and fails the test with what when it never holds.
func until(t *testing.T, d time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > d {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// of is Of, failing the test on an error.
func of(t *testing.T, c *pgx.Conn, slot string) (Record, bool) {
	t.Helper()
	rec, ok, err := Of(context.Background(), c, "cdc_router", slot)
	if err != nil {
		t.Fatal(err)
	}
	return rec, ok
}

// TestKeepWritesTheRecordAndFollowsTheRole: every field Keep is given is read back by List and Of, with the
// process's own host, pid and start in Instance; a role change reaches the row within 2 s; when the context
// ends Keep marks the record stopped and returns.
func TestKeepWritesTheRecordAndFollowsTheRole(t *testing.T) {
	url, c := migrated(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	started := time.Now().Add(-time.Minute).Truncate(time.Second)
	rec := Record{Slot: "orders", Publication: "orders_pub", Tables: []string{"public.outbox", "billing.outbox"},
		Mappings:      map[string]string{"billing.outbox": "table.field.event.id=uuid\ntable.field.event.key=account\n"},
		MessagePrefix: "app.events", Shard: "1/4", Exchange: "events", Version: "v1.2.3", StartedAt: started,
		Settings: map[string]string{"pg-url": "postgres://router:xxxxx@db/app", "exchange": "events"}}
	state := &roleState{role: metrics.StateStarting}
	done := make(chan struct{})
	go func() { Keep(ctx, connector(url), "cdc_router", rec, state.get, nil); close(done) }()

	var got Record
	until(t, 5*time.Second, "no record written at start", func() bool { got, _ = of(t, c, "orders"); return got.Slot != "" })
	host, _ := os.Hostname()
	want := rec
	want.Role, want.Host, want.PID, want.Instance = metrics.StateStarting, host, os.Getpid(), fmt.Sprintf("%s/%d/%d", host, os.Getpid(), started.Unix())
	want.HeartbeatAt = got.HeartbeatAt
	if !got.StartedAt.Equal(started) {
		t.Errorf("started_at %v, want %v", got.StartedAt, started)
	}
	got.StartedAt = started
	if !equal(got, want) {
		t.Fatalf("record read back:\n%+v\nwant\n%+v", got, want)
	}
	list, err := List(ctx, c, "cdc_router")
	if err != nil || len(list) != 1 || !equal(list[0], got) {
		t.Fatalf("List = %+v, %v; want the one record", list, err)
	}
	now, _ := Now(ctx, c)
	if got.HeartbeatAt.IsZero() || !got.Live(now) {
		t.Fatalf("heartbeat %v, live %v at %v", got.HeartbeatAt, got.Live(now), now)
	}

	state.set(metrics.StateStreaming, errors.New("broker connection lost"))
	took := until(t, 3*time.Second, "the role change did not reach the row", func() bool {
		got, _ = of(t, c, "orders")
		return got.Role == metrics.StateStreaming
	})
	t.Logf("role change in the row after %v", took)
	if took > 2*time.Second || got.LastError != "broker connection lost" {
		t.Errorf("role change after %v (want within 2 s), last_error %q", took, got.LastError)
	}
	if got.Publishing != nil {
		t.Errorf("publishing %+v recorded while the state reported none", *got.Publishing)
	}

	// What the router publishes is written with the role (at once on a change, else every beat) and read
	// back; nil again once it stops publishing.
	state.publishing(&Publishing{WindowLimit: 37, InFlight: 5})
	state.set(metrics.StateSnapshot, nil)
	until(t, 3*time.Second, "the publishing did not reach the row", func() bool {
		got, _ = of(t, c, "orders")
		return got.Publishing != nil
	})
	if *got.Publishing != (Publishing{WindowLimit: 37, InFlight: 5}) {
		t.Errorf("publishing read back %+v, want limit 37 and 5 in flight", *got.Publishing)
	}
	state.publishing(nil)
	state.set(metrics.StateStandby, nil)
	until(t, 3*time.Second, "the publishing of a router that stopped publishing stayed in the row", func() bool {
		got, _ = of(t, c, "orders")
		return got.Role == metrics.StateStandby && got.Publishing == nil
	})

	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Keep did not return after its context ended")
	}
	got, _ = of(t, c, "orders")
	now, _ = Now(context.Background(), c)
	if got.Role != metrics.StateStopped || got.StoppedAt == nil || got.Live(now) {
		t.Fatalf("after the end: role %q, stopped_at %v, live %v; want stopped", got.Role, got.StoppedAt, got.Live(now))
	}
}

// equal compares records, times by instant.
func equal(a, b Record) bool {
	return a.Slot == b.Slot && a.Instance == b.Instance && a.Role == b.Role && a.Publication == b.Publication &&
		slices.Equal(a.Tables, b.Tables) && maps.Equal(a.Mappings, b.Mappings) && a.MessagePrefix == b.MessagePrefix &&
		a.Shard == b.Shard && a.Exchange == b.Exchange && maps.Equal(a.Settings, b.Settings) && a.Version == b.Version &&
		a.Host == b.Host && a.PID == b.PID && a.StartedAt.Equal(b.StartedAt) && a.HeartbeatAt.Equal(b.HeartbeatAt) &&
		(a.StoppedAt == nil) == (b.StoppedAt == nil) && a.LastError == b.LastError
}

// fastKeeper is a keeper with beats of 200 ms, logging into a buffer; run it with go k.run(ctx).
func fastKeeper(url, slot string, state func() State) (*keeper, *testenv.Buffer) {
	var out testenv.Buffer
	k := newKeeper(connector(url), "cdc_router", Record{Slot: slot, Publication: "p", Tables: []string{"public.outbox"}},
		state, slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelInfo})))
	k.beat, k.poll = 200*time.Millisecond, 50*time.Millisecond
	return k, &out
}

// TestKeepWithoutRightsWarnsOnceNamingTheGrant: a role that may not write the routers table gets one WARN
// naming the GRANT however many beats fail, Keep neither blocks nor stops; once granted, the next beat
// writes the record and says so at INFO, and the end is written within its bound.
func TestKeepWithoutRightsWarnsOnceNamingTheGrant(t *testing.T) {
	url, c := migrated(t)
	role := "router_" + testenv.Name(t)
	exec(t, c, "CREATE ROLE "+role+" LOGIN; GRANT USAGE ON SCHEMA cdc_router TO "+role)
	k, out := fastKeeper(strings.Replace(url, "postgres@", role+"@", 1), "s", func() State { return State{Role: metrics.StateStandby} })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.run(ctx); close(done) }()
	grant := strings.ReplaceAll(`GRANT SELECT, INSERT, UPDATE, DELETE ON "cdc_router"."routers" TO "`+role+`"`, `"`, `\"`) // as slog's text quotes it
	until(t, 5*time.Second, "no WARN naming the GRANT", func() bool { return strings.Contains(out.String(), grant) })
	time.Sleep(time.Second) // five more beats, each refused
	if n := strings.Count(out.String(), "level=WARN"); n != 1 {
		t.Fatalf("%d WARN lines, want 1:\n%s", n, out)
	}
	exec(t, c, "GRANT SELECT, INSERT, UPDATE, DELETE ON cdc_router.routers TO "+role)
	until(t, 3*time.Second, "no record after the grant", func() bool { _, ok := of(t, c, "s"); return ok })
	until(t, time.Second, "no INFO line saying the record is written again", func() bool {
		return strings.Contains(out.String(), "level=INFO msg=\"the router's record is written again\"")
	})
	exec(t, c, "REVOKE ALL ON cdc_router.routers FROM "+role)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Keep did not return after its context ended")
	}
	t.Logf("log:\n%s", out)
}

// TestKeepWithoutTheTableWritesOnceItExists: against a schema that predates 015, Keep warns once naming
// migrate and keeps beating; after migrate the record appears. A connection cut later (the server ends its
// session) is replaced at the next beat, with one WARN and one INFO.
func TestKeepWithoutTheTableWritesOnceItExists(t *testing.T) {
	url, c := migrated(t)
	exec(t, c, "DROP TABLE cdc_router.routers")
	state := &roleState{role: metrics.StateStreaming}
	k, out := fastKeeper(url, "s", state.get)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { k.run(ctx); close(done) }()
	until(t, 5*time.Second, "no WARN naming migrate", func() bool { return strings.Contains(out.String(), "run `cdc-router migrate`") })
	time.Sleep(600 * time.Millisecond)
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	until(t, 3*time.Second, "no record after migrate", func() bool { _, ok := of(t, c, "s"); return ok })

	exec(t, c, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")
	state.set(metrics.StateRestarting, nil)
	until(t, 3*time.Second, "the role after the cut never reached the row", func() bool {
		rec, _ := of(t, c, "s")
		return rec.Role == metrics.StateRestarting
	})
	cancel()
	<-done
	log := out.String()
	if w, i := strings.Count(log, "level=WARN"), strings.Count(log, "level=INFO"); w != 2 || i != 2 {
		t.Errorf("%d WARN and %d INFO lines, want 2 of each (no table, then the cut; written again after each):\n%s", w, i, log)
	}
	t.Logf("log:\n%s", log)
}

// TestKeepWritesARecordIntoATableBefore019: a routers table without the publishing columns (a schema
// migrated before 019, the router upgraded first) still gets the record, role changes included, with one
// WARN naming migrate; Of reads it as a record without publishing.
func TestKeepWritesARecordIntoATableBefore019(t *testing.T) {
	url, c := migrated(t)
	exec(t, c, "ALTER TABLE cdc_router.routers DROP COLUMN window_limit, DROP COLUMN inflight_events")
	state := &roleState{role: metrics.StateStreaming, pub: &Publishing{WindowLimit: 64, InFlight: 1}}
	k, out := fastKeeper(url, "s", state.get)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { k.run(ctx); close(done) }()
	until(t, 5*time.Second, "no record in a table before 019", func() bool { _, ok := of(t, c, "s"); return ok })
	state.set(metrics.StateStandby, nil)
	until(t, 3*time.Second, "the role change did not reach a table before 019", func() bool {
		got, _ := of(t, c, "s")
		return got.Role == metrics.StateStandby
	})
	cancel()
	<-done
	if got, _ := of(t, c, "s"); got.Publishing != nil {
		t.Errorf("publishing %+v read from a table without its columns", *got.Publishing)
	}
	if n := strings.Count(out.String(), "level=WARN"); n != 1 || !strings.Contains(out.String(), "run `cdc-router migrate`") {
		t.Errorf("want one WARN naming migrate, got:\n%s", out)
	}
}
