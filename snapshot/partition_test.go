package snapshot

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
)

// setupPartitioned makes a database with a partitioned outbox (`migrate --partitioned`) holding aggs
// aggregates of versions 1..perAgg twice: once in this month's partition and once in next month's, which
// the partitioned table's unique key (aggregate_type, aggregate_id, aggregate_version, occurred_at) allows.
// It returns a reader connection (UTC, ISO) and a state connection.
func setupPartitioned(t *testing.T, aggs, perAgg int) (read, state *pgx.Conn) {
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
	mcfg := migrations.Config{Partitioned: true, PartitionInterval: "month", PartitionsAhead: 2}
	if err := migrations.Apply(ctx, state, mcfg); err != nil {
		t.Fatal(err)
	}
	_, err = state.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, occurred_at)
		SELECT gen_random_uuid(), 'order', 'a' || a, v, 'created', jsonb_build_object('v', v, 'm', m),
		       date_trunc('month', now()) + m * interval '1 month' + v * interval '1 second'
		FROM generate_series(1, $1) a, generate_series(1, $2) v, generate_series(0, 1) m`, aggs, perAgg)
	if err != nil {
		t.Fatal(err)
	}
	var leaves int
	if err := state.QueryRow(ctx, `SELECT count(DISTINCT tableoid) FROM outbox`).Scan(&leaves); err != nil || leaves != 2 {
		t.Fatalf("rows in %d partitions (%v), want 2", leaves, err)
	}
	return read, state
}

// checkOnceInVersionOrder wants every row of the outbox published exactly once after skip, each
// aggregate's versions in order.
func checkOnceInVersionOrder(t *testing.T, state *pgx.Conn, events []cdc.Event, want int) {
	t.Helper()
	seen := map[string]int{}
	last := map[string]int64{}
	for _, ev := range events {
		seen[ev.ID]++
		if ev.AggregateVersion < last[ev.AggregateID] {
			t.Fatalf("%s: v%d after v%d", ev.AggregateID, ev.AggregateVersion, last[ev.AggregateID])
		}
		last[ev.AggregateID] = ev.AggregateVersion
	}
	for id, n := range seen {
		if n != 1 {
			t.Errorf("row %s published %d times", id, n)
		}
	}
	if len(seen) != want {
		t.Fatalf("published %d distinct rows, want %d", len(seen), want)
	}
}

// TestPartitionedCopyPagesByAUniqueKey: on a partitioned outbox whose aggregate keys repeat across
// partitions, pages of 7 rows (so page ends fall between two rows of one aggregate key) publish every row
// once, each aggregate in version order, and store the whole key, partition column included.
func TestPartitionedCopyPagesByAUniqueKey(t *testing.T) {
	ctx := context.Background()
	read, state := setupPartitioned(t, 3, 12)
	job := newJob(t, state, "p1", "")
	jobs := NewJobs(state, "cdc_router")
	left, err := Count(ctx, Config{}, read, nil)
	if err != nil || left != 72 {
		t.Fatalf("Count = %d, %v; want 72", left, err)
	}
	pub := &fakePublisher{failed: make(chan struct{})}
	done, err := Copy(ctx, Config{PageSize: 7, Slot: "s"}, read, jobs, job, pub, NewReporter(quiet, nil, job.Name, 0))
	if err != nil {
		t.Fatal(err)
	}
	checkOnceInVersionOrder(t, state, pub.events, 72)
	if done.RowsDone != 72 || !done.Done() {
		t.Fatalf("job %+v, want 72 rows done", done)
	}
	var stored, ts string
	if err := state.QueryRow(ctx, `SELECT last_key::text FROM cdc_router.snapshots WHERE name = 'p1'`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if err := read.QueryRow(ctx, `SELECT (date_trunc('month', now()) + interval '1 month 12 seconds')::text`).Scan(&ts); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf(`["order", "a3", 12, "%s"]`, ts); stored != want {
		t.Errorf("stored last_key %s, want %s: [type, id, version, occurred_at] of the last row", stored, want)
	}
	loaded, _, err := jobs.Load(ctx, "p1")
	if err != nil || loaded.LastKey == nil || len(loaded.LastKey.Partition) != 1 {
		t.Fatalf("Load = %+v, %v; want a key with its partition value", loaded.LastKey, err)
	}
}

// TestPartitionedCopyResumes: a job resumes after a stored whole key with exactly the rows after it, and
// after a key stored without the partition value (by an older version, or before the outbox was
// partitioned) with the rows from its aggregate key on: some again, none skipped.
func TestPartitionedCopyResumes(t *testing.T) {
	ctx := context.Background()
	read, state := setupPartitioned(t, 2, 10)
	jobs := NewJobs(state, "cdc_router")
	var ts string // a1 v9 in this month's partition: the first of its two rows in key order
	err := read.QueryRow(ctx, `SELECT occurred_at::text FROM outbox WHERE aggregate_id = 'a1' AND aggregate_version = 9
		ORDER BY occurred_at LIMIT 1`).Scan(&ts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		key  Key
		want int
	}{
		{"whole key", Key{AggregateType: "order", AggregateID: "a1", Version: 9, Partition: []string{ts}}, 2*10 + 3},
		{"aggregate key only", Key{AggregateType: "order", AggregateID: "a1", Version: 9}, 2*10 + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "resume-" + fmt.Sprint(len(tc.key.Partition))
			newJob(t, state, name, "")
			if err := jobs.Progress(ctx, name, tc.key, 17, 40); err != nil {
				t.Fatal(err)
			}
			job, _, err := jobs.Load(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			left, err := Count(ctx, Config{}, read, job.LastKey)
			if err != nil || left != int64(tc.want) {
				t.Fatalf("Count after %+v = %d, %v; want %d", job.LastKey, left, err, tc.want)
			}
			pub := &fakePublisher{failed: make(chan struct{})}
			if _, err := Copy(ctx, Config{PageSize: 3}, read, jobs, job, pub, NewReporter(quiet, nil, name, 17)); err != nil {
				t.Fatal(err)
			}
			checkOnceInVersionOrder(t, state, pub.events, tc.want)
			if first := pub.events[0]; first.AggregateID != "a1" || first.AggregateVersion != 9 {
				t.Errorf("resumed at %s v%d, want a1 v9 (the other row of v9, or both)", first.AggregateID, first.AggregateVersion)
			}
		})
	}
}

// TestPartitionedCopyQuarantinesEachRow: two bad rows with one aggregate key in two partitions get a
// quarantine record each (the record key carries the partition value).
func TestPartitionedCopyQuarantinesEachRow(t *testing.T) {
	ctx := context.Background()
	read, state := setupPartitioned(t, 1, 3)
	if _, err := state.Exec(ctx, `UPDATE outbox SET headers = '[1]' WHERE aggregate_version = 2`); err != nil {
		t.Fatal(err)
	}
	job := newJob(t, state, "pq", "")
	pub := &fakePublisher{failed: make(chan struct{})}
	if _, err := Copy(ctx, Config{Slot: "backfill:pq"}, read, NewJobs(state, "cdc_router"), job, pub,
		NewReporter(quiet, nil, "pq", 0)); err != nil {
		t.Fatal(err)
	}
	var keys []string
	if err := state.QueryRow(ctx, `SELECT array_agg(row_key ORDER BY row_key) FROM cdc_router.quarantine`).Scan(&keys); err != nil {
		t.Fatal(err)
	}
	t.Logf("quarantine keys %q", keys)
	if len(pub.events) != 4 || len(keys) != 2 || keys[0] == keys[1] {
		t.Fatalf("published %d, quarantined %q; want 4 events and two records", len(pub.events), keys)
	}
}
