package initial

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/snapshot"
)

// pg is the throwaway PostgreSQL cluster of this test binary; each test gets its own database.
var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// routerDB is a new database with the router's schema (migrate), and a connection to it.
func routerDB(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := migrations.Apply(ctx, conn, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	return conn
}

// recorded is a job on record before Due runs: started with predicate, and finished when done.
type recorded struct {
	name, predicate string
	done            bool
}

func recordJobs(t *testing.T, conn *pgx.Conn, jobs []recorded) {
	t.Helper()
	ctx := context.Background()
	js := snapshot.NewJobs(conn, "cdc_router")
	for _, r := range jobs {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			return js.Start(ctx, tx, snapshot.Job{Name: r.name, Kind: "initial", Predicate: r.predicate, ReadLSN: 0x1000})
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := js.Progress(ctx, r.name, snapshot.Key{}, 3, 10); err != nil {
			t.Fatal(err)
		}
		if r.done {
			if err := js.Finish(ctx, r.name, 10); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// Due decides, from the jobs on record, the stored position and --snapshot, which initial snapshots a
// start copies: every table's for a slot with no record of either (fresh), the unfinished ones resumed
// with the predicate they began with, none once done; and it refuses to stream past an unfinished one
// (--snapshot=never, or a table this run does not read), naming the fix.
func TestDue(t *testing.T) {
	const start = cdc.LSN(0x5000)
	one := Config{Slot: "s1", Schema: "cdc_router", Table: "public.outbox", Snapshot: "initial", SnapshotWhere: "true"}
	two := twoTables(t)
	two.Snapshot = "initial"
	never := func(c Config) Config { c.Snapshot = "never"; return c }
	for _, c := range []struct {
		name      string
		cfg       Config
		jobs      []recorded
		hasStored bool
		wantJobs  []string // job names of the todo, in table order
		wantPreds []string // their predicates
		fresh     bool
		refusal   []string // substrings of the refusal; nil for none
	}{
		{name: "new slot, one table", cfg: one, wantJobs: []string{"initial:s1"}, wantPreds: []string{"true"}, fresh: true},
		{name: "new slot, two tables", cfg: two,
			wantJobs: []string{"initial:s1/public.outbox", "initial:s1/billing.events"}, wantPreds: []string{"id > 0", "id > 0"}, fresh: true},
		{name: "a stored position and no jobs: streamed before snapshots were kept", cfg: one, hasStored: true},
		{name: "snapshot never", cfg: never(one)},
		{name: "only another slot's jobs", cfg: one, jobs: []recorded{{name: "initial:s2", predicate: "x"}},
			wantJobs: []string{"initial:s1"}, wantPreds: []string{"true"}, fresh: true},
		{name: "done", cfg: one, jobs: []recorded{{name: "initial:s1", predicate: "true", done: true}}, hasStored: true},
		{name: "done, no stored position: never copied again", cfg: one,
			jobs: []recorded{{name: "initial:s1", predicate: "true", done: true}}, hasStored: false},
		{name: "unfinished resumes with its own predicate", cfg: one, hasStored: true,
			jobs:     []recorded{{name: "initial:s1", predicate: "aggregate_type = 'order'"}},
			wantJobs: []string{"initial:s1"}, wantPreds: []string{"aggregate_type = 'order'"}},
		{name: "two tables, one unfinished", cfg: two, hasStored: true, jobs: []recorded{
			{name: "initial:s1/public.outbox", predicate: "id > 0", done: true},
			{name: "initial:s1/billing.events", predicate: "id > 0"}},
			wantJobs: []string{"initial:s1/billing.events"}, wantPreds: []string{"id > 0"}},
		{name: "unfinished under --snapshot=never", cfg: never(one), hasStored: true,
			jobs:    []recorded{{name: "initial:s1", predicate: "true"}},
			refusal: []string{"initial snapshot of slot s1 is unfinished (3 of 10 rows)", "--snapshot=initial", "cdc-router reset --slot s1"}},
		{name: "unfinished table under --snapshot=never names the table", cfg: never(two), hasStored: true,
			jobs:    []recorded{{name: "initial:s1/billing.events", predicate: "id > 0"}},
			refusal: []string{"initial snapshot of billing.events (slot s1) is unfinished", "--snapshot=initial"}},
		{name: "unfinished table this run does not read", cfg: one, hasStored: true,
			jobs:    []recorded{{name: "initial:s1/billing.events", predicate: "id > 0"}},
			refusal: []string{"initial:s1/billing.events of slot s1 is unfinished", "the --table it began with", "cdc-router reset --slot s1"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn := routerDB(t)
			recordJobs(t, conn, c.jobs)
			todo, fresh, err := Due(context.Background(), c.cfg, conn, start, c.hasStored)
			if c.refusal != nil {
				if err == nil {
					t.Fatalf("Due = %d jobs, want the refusal %q", len(todo), c.refusal)
				}
				for _, s := range c.refusal {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("refusal %q lacks %q", err, s)
					}
				}
				var fatal *cdc.Fatal
				if !errors.As(err, &fatal) {
					t.Errorf("refusal %v is not fatal: the router would retry it", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Due: %v", err)
			}
			var names, preds []string
			for _, j := range todo {
				names, preds = append(names, j.job.Name), append(preds, j.job.Predicate)
				if fresh && (j.job.ReadLSN != start || j.job.Kind != "initial") {
					t.Errorf("fresh job %s: read LSN %v kind %q, want %v initial", j.job.Name, j.job.ReadLSN, j.job.Kind, start)
				}
			}
			if !slices.Equal(names, c.wantJobs) || !slices.Equal(preds, c.wantPreds) || fresh != c.fresh {
				t.Errorf("Due = %q with predicates %q, fresh %v; want %q with %q, fresh %v", names, preds, fresh,
					c.wantJobs, c.wantPreds, c.fresh)
			}
		})
	}
}

// record writes every job of the todo, each with the snapshot the copy reads in, and only then the
// position the stream starts from: a crash before the position is stored leaves the jobs to resume.
func TestRecordStoresTheJobsThenThePosition(t *testing.T) {
	ctx := context.Background()
	conn := routerDB(t)
	cfg := twoTables(t)
	todo := []Job{
		{table: "public.outbox", job: snapshot.Job{Name: cfg.initialName("public.outbox"), Kind: "initial", Predicate: "id > 0", ReadLSN: 0x7000}},
		{table: "billing.events", job: snapshot.Job{Name: cfg.initialName("billing.events"), Kind: "initial", Predicate: "id > 0", ReadLSN: 0x7000}},
	}
	store := offsets.NewStore(conn, "cdc_router", "s1", time.Second)
	pos := offsets.Position{LSN: 0x7000, SystemID: "7300000000000000001", Timeline: 1}
	const seen = "1000:1002:1001"
	records := map[string]string{"public.outbox": seen, "billing.events": seen}
	if err := record(ctx, conn, snapshot.NewJobs(conn, "cdc_router"), store, todo, records, pos); err != nil {
		t.Fatal(err)
	}
	jobs := snapshot.NewJobs(conn, "cdc_router")
	for _, j := range todo {
		got, ok, err := jobs.Load(ctx, j.job.Name)
		if err != nil || !ok {
			t.Fatalf("job %s: ok %v, %v", j.job.Name, ok, err)
		}
		if got.State != snapshot.StateRunning || got.ReadSnapshot != seen || got.Predicate != "id > 0" || got.ReadLSN != 0x7000 {
			t.Errorf("job %s = state %q snapshot %q predicate %q lsn %v; want running %q \"id > 0\" 0/7000",
				j.job.Name, got.State, got.ReadSnapshot, got.Predicate, got.ReadLSN, seen)
		}
	}
	stored, ok, err := offsets.NewStore(conn, "cdc_router", "s1", time.Second).Load(ctx)
	if err != nil || !ok || stored.LSN != pos.LSN || stored.SystemID != pos.SystemID {
		t.Errorf("stored position = %+v, %v, %v; want %v of %s", stored, ok, err, pos.LSN, pos.SystemID)
	}
	// Due then resumes exactly these jobs, not a fresh copy, although the slot has a stored position.
	cfg.Snapshot = "initial"
	again, fresh, err := Due(ctx, cfg, conn, 0x9000, true)
	if err != nil || fresh || len(again) != 2 {
		t.Errorf("Due after record = %d jobs, fresh %v, %v; want the 2 recorded, not fresh", len(again), fresh, err)
	}
}
