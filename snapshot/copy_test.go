package snapshot

import (
	"context"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// fakePublisher confirms every event at once, from another goroutine, and records the order. An event
// for which refuse returns an error is not published and gets that error.
type fakePublisher struct {
	mu     sync.Mutex
	events []cdc.Event
	failed chan struct{}
	refuse func(cdc.Event) error
}

func (f *fakePublisher) Publish(ctx context.Context, ev cdc.Event, done func()) error {
	if f.refuse != nil {
		if err := f.refuse(ev); err != nil {
			return err
		}
	}
	f.mu.Lock()
	f.events = append(f.events, ev)
	f.mu.Unlock()
	go done()
	return nil
}
func (f *fakePublisher) Failed() <-chan struct{} { return f.failed }
func (f *fakePublisher) Err() error              { return nil }

// setup makes a database with the outbox holding aggs aggregates of versions 1..perAgg, and returns a
// reader connection (UTC, ISO) and a state connection.
func setup(t *testing.T, aggs, perAgg int) (read, state *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	url := pg.NewDatabase(t)
	cfg, _ := pgx.ParseConfig(url)
	cfg.RuntimeParams["TimeZone"], cfg.RuntimeParams["DateStyle"] = "UTC", "ISO"
	var err error
	if read, err = pgx.ConnectConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if state, err = pgx.Connect(ctx, url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { read.Close(ctx); state.Close(ctx) })
	if err := migrations.Apply(ctx, state, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	_, err = state.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'order', 'a' || a, v, 'created', jsonb_build_object('v', v)
		FROM generate_series(1, $1) a, generate_series(1, $2) v`, aggs, perAgg)
	if err != nil {
		t.Fatal(err)
	}
	return read, state
}

func newJob(t *testing.T, state *pgx.Conn, name, where string) Job {
	t.Helper()
	ctx := context.Background()
	jobs := NewJobs(state, "cdc_router")
	job := Job{Name: name, Kind: "backfill", Predicate: where, ReadLSN: 0x1000}
	if err := pgx.BeginFunc(ctx, state, func(tx pgx.Tx) error { return jobs.Start(ctx, tx, job) }); err != nil {
		t.Fatal(err)
	}
	return job
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestCopyPagesInKeyOrder: pages of 7 rows over versions 1..12 (so "10" < "9" as text would show), every
// row once, each aggregate in version order, progress stored as done.
func TestCopyPagesInKeyOrder(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 3, 12)
	job := newJob(t, state, "b1", "")
	pub := &fakePublisher{failed: make(chan struct{})}
	cfg := Config{PageSize: 7, Slot: "s"}
	done, err := Copy(ctx, cfg, read, NewJobs(state, "cdc_router"), job, pub, NewReporter(quiet, nil, job.Name, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.events) != 36 || done.RowsDone != 36 || !done.Done() {
		t.Fatalf("published %d, done %+v; want 36 rows and a finished job", len(pub.events), done)
	}
	last := map[string]int64{}
	for _, ev := range pub.events {
		if ev.AggregateVersion != last[ev.AggregateID]+1 {
			t.Fatalf("%s: v%d after v%d", ev.AggregateID, ev.AggregateVersion, last[ev.AggregateID])
		}
		last[ev.AggregateID] = ev.AggregateVersion
		if !ev.Backfill || ev.CommitLSN != 0x1000 {
			t.Fatalf("event not marked with the read position: %+v", ev)
		}
	}
	stored, _, _ := NewJobs(state, "cdc_router").Load(ctx, "b1")
	if !stored.Done() || stored.RowsDone != 36 || stored.LastKey == nil || !reflect.DeepEqual(*stored.LastKey, Key{AggregateType: "order", AggregateID: "a3", Version: 12}) {
		t.Fatalf("stored progress %+v", stored)
	}
}

// TestCopyResumesAfterTheLastKey: a job with a stored key publishes only the rows after it.
func TestCopyResumesAfterTheLastKey(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 2, 10)
	job := newJob(t, state, "b2", "")
	jobs := NewJobs(state, "cdc_router")
	if err := jobs.Progress(ctx, "b2", Key{AggregateType: "order", AggregateID: "a1", Version: 9}, 9, 20); err != nil {
		t.Fatal(err)
	}
	job, _, _ = jobs.Load(ctx, "b2")
	pub := &fakePublisher{failed: make(chan struct{})}
	if _, err := Copy(ctx, Config{PageSize: 4}, read, jobs, job, pub, NewReporter(quiet, nil, "b2", 9)); err != nil {
		t.Fatal(err)
	}
	if len(pub.events) != 11 || pub.events[0].AggregateID != "a1" || pub.events[0].AggregateVersion != 10 {
		t.Fatalf("resumed with %d events starting at %+v, want 11 starting at a1 v10", len(pub.events), pub.events[0])
	}
}

// TestCopyQuarantinesBadRowsAndFiltersByPredicate.
func TestCopyQuarantinesBadRowsAndFiltersByPredicate(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 2, 5)
	if _, err := state.Exec(ctx, `UPDATE outbox SET headers = '[1]' WHERE aggregate_id = 'a1' AND aggregate_version = 3`); err != nil {
		t.Fatal(err)
	}
	job := newJob(t, state, "b3", "aggregate_id = 'a1'")
	pub := &fakePublisher{failed: make(chan struct{})}
	cfg := Config{Where: "aggregate_id = 'a1'", Slot: "backfill:b3"}
	if _, err := Copy(ctx, cfg, read, NewJobs(state, "cdc_router"), job, pub, NewReporter(quiet, nil, "b3", 0)); err != nil {
		t.Fatal(err)
	}
	if len(pub.events) != 4 {
		t.Fatalf("published %d, want the 4 good rows of a1", len(pub.events))
	}
	var reason, key string
	if err := state.QueryRow(ctx, `SELECT reason, row_key FROM cdc_router.quarantine`).Scan(&reason, &key); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(reason, "headers") || key != `["order","a1",3]` {
		t.Fatalf("quarantine %q %q", reason, key)
	}
}

func TestBadPredicateNamesTheFlag(t *testing.T) {
	read, _ := setup(t, 1, 1)
	_, err := Count(context.Background(), Config{Where: "no_such_column IS NULL"}, read, nil)
	if err == nil || !strings.Contains(err.Error(), "fix --snapshot-where / --where") {
		t.Fatalf("Count = %v", err)
	}
}

func TestRateLimit(t *testing.T) {
	read, state := setup(t, 1, 40)
	job := newJob(t, state, "b4", "")
	pub := &fakePublisher{failed: make(chan struct{})}
	began := time.Now()
	if _, err := Copy(context.Background(), Config{Rate: 200}, read, NewJobs(state, "cdc_router"), job, pub,
		NewReporter(quiet, nil, "b4", 0)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(began); took < 190*time.Millisecond {
		t.Fatalf("40 rows at 200 rows/s took %v", took)
	}
}
