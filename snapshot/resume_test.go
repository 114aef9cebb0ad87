package snapshot

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestResumedSnapshotLeavesLaterRowsToTheStream: an initial snapshot resumed in a new snapshot copies only
// what the slot's own snapshot saw. The rows committed after it (a1 v3 and v5, and b1 v1, whose
// transaction was open when the snapshot was taken) are the stream's; copied too, v5 went out before v4,
// which its transaction deleted and only the stream has (the chaos finding snapshot-resume-deleted, seeds
// 2008 and 2016). A row an hour older than the job by occurred_at is copied whatever its xmin (an old frozen
// row's xmin may fall in the window).
func TestResumedSnapshotLeavesLaterRowsToTheStream(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 1, 2) // a1 v1, v2
	insert := func(c *pgx.Conn, agg string, v int, occurred string) {
		t.Helper()
		if _, err := c.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, occurred_at)
			VALUES (gen_random_uuid(), 'order', $1, $2, 'created', '{}', `+occurred+`)`, agg, v); err != nil {
			t.Fatal(err)
		}
	}
	open, err := pgx.Connect(ctx, read.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close(ctx)
	tx, err := open.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'b1', 1, 'created', '{}')`); err != nil {
		t.Fatal(err)
	}
	var seen string // the slot's snapshot, as replication records it
	if err := read.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	insert(state, "a1", 3, "now()")
	if _, err := state.Exec(ctx, `BEGIN; INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES ('00000000-0000-4000-8000-000000000004', 'order', 'a1', 4, 'created', '{}');
		DELETE FROM outbox WHERE id = '00000000-0000-4000-8000-000000000004'; COMMIT`); err != nil {
		t.Fatal(err)
	}
	insert(state, "a1", 5, "now()")
	insert(state, "c1", 1, "now() - interval '2 hours'")

	jobs := NewJobs(state, "cdc_router")
	name := InitialName("s")
	err = pgx.BeginFunc(ctx, state, func(tx pgx.Tx) error {
		return jobs.Start(ctx, tx, Job{Name: name, Kind: "initial", ReadLSN: 0x1000, ReadSnapshot: seen})
	})
	if err != nil {
		t.Fatal(err)
	}
	job, _, err := jobs.Load(ctx, name)
	if err != nil || job.ReadSnapshot != seen {
		t.Fatalf("stored snapshot %q (%v), want %q", job.ReadSnapshot, err, seen)
	}
	// The resume: a new snapshot, and the job's snapshot as replication's copyTables passes it.
	rtx, err := read.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer rtx.Rollback(ctx)
	cfg := Config{Slot: "s", SeenBy: job.ReadSnapshot, SeenSince: job.StartedAt}
	if n, err := Count(ctx, cfg, rtx, nil); err != nil || n != 3 {
		t.Fatalf("count %d (%v), want 3", n, err)
	}
	pub := &fakePublisher{failed: make(chan struct{})}
	if _, err := Copy(ctx, cfg, rtx, jobs, job, pub, NewReporter(quiet, nil, name, 0)); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range pub.events {
		got = append(got, fmt.Sprintf("%s v%d", ev.AggregateID, ev.AggregateVersion))
	}
	if want := []string{"a1 v1", "a1 v2", "c1 v1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("the resumed copy published %v, want %v", got, want)
	}
}

// TestPartitionedResumedSnapshotLeavesLaterRows: the same on a partitioned outbox (xmin read through the
// partitioned table).
func TestPartitionedResumedSnapshotLeavesLaterRows(t *testing.T) {
	ctx := context.Background()
	read, state := setupPartitioned(t, 1, 2) // 4 rows
	var seen string
	if err := read.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'a1', 3, 'created', '{}')`); err != nil {
		t.Fatal(err)
	}
	var now time.Time
	if err := state.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	if n, err := Count(ctx, Config{SeenBy: seen, SeenSince: now}, read, nil); err != nil || n != 4 {
		t.Fatalf("count %d (%v), want the 4 rows the snapshot saw", n, err)
	}
}

// TestRewriteSinceTheSlotCopiesEveryRow (the randomized harness's seed 9441): an initial snapshot cut before
// its first page, then the table rewritten (ALTER … TYPE gives every row the ALTER's transaction id), then
// resumed in a new snapshot. Judged by the slot's snapshot, every row looked committed after it and was left
// to the stream, which does not have the rows committed before the slot: all were lost. The record carries
// the table's storage as the slot's snapshot saw it; a rewrite since changes it, and the resumed copy copies
// every row. Without a rewrite the record still leaves later rows to the stream.
func TestRewriteSinceTheSlotCopiesEveryRow(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 1, 3) // a1 v1, v2, v3: committed before the "slot"
	stx, err := read.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	var seen string
	if err := stx.QueryRow(ctx, `SELECT pg_current_snapshot()::text`).Scan(&seen); err != nil {
		t.Fatal(err)
	}
	files, err := StorageOf(ctx, stx, "public.outbox")
	if err != nil || files == "" {
		t.Fatalf("storage %q, %v", files, err)
	}
	stx.Rollback(ctx)
	record := SeenRecord(seen, files)
	if _, err := state.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'a1', 4, 'created', '{}')`); err != nil { // after the "slot": the stream's
		t.Fatal(err)
	}
	count := func() (int64, string) {
		t.Helper()
		rtx, err := read.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			t.Fatal(err)
		}
		defer rtx.Rollback(ctx)
		by, rewritten, err := SeenBy(ctx, rtx, "public.outbox", record)
		if err != nil {
			t.Fatal(err)
		}
		n, err := Count(ctx, Config{Slot: "s", SeenBy: by, SeenSince: time.Now()}, rtx, nil)
		if err != nil {
			t.Fatal(err)
		}
		return n, rewritten
	}
	if n, rewritten := count(); n != 3 || rewritten != "" {
		t.Fatalf("before a rewrite: %d rows copied (rewritten %q), want the 3 the slot's snapshot saw", n, rewritten)
	}
	for _, ty := range []string{"text", "jsonb"} {
		if _, err := state.Exec(ctx, `ALTER TABLE outbox ALTER COLUMN headers TYPE `+ty+` USING headers::`+ty); err != nil {
			t.Fatal(err)
		}
	}
	if n, rewritten := count(); n != 4 || rewritten == "" {
		t.Fatalf("after a rewrite: %d rows copied (rewritten %q), want all 4, the rewrite named", n, rewritten)
	}
	if by, _, err := SeenBy(ctx, nil, "public.outbox", seen); err != nil || by != seen {
		t.Errorf("a record without files: %q, %v; want its snapshot %q", by, err, seen)
	}
}
