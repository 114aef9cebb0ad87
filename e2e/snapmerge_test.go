package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestInitialSnapshotMergesAggregatesAcrossTables: the initial snapshot of two outbox tables used to copy
// one table after the other, so an aggregate with v1 and v3 in the first table and v2 in the second
// arrived v1, v3, v2. The tables are now copied merged in key order: v1, v2, v3.
func TestInitialSnapshotMergesAggregatesAcrossTables(t *testing.T) {
	e := twoOutboxes(t, true)
	c := e.consume(e.queue)
	var want []written
	err := pgx.BeginFunc(context.Background(), e.db, func(tx pgx.Tx) error {
		for _, agg := range []string{"agg-1", "agg-2"} {
			for v, table := range []string{"outbox", "outbox_b", "outbox", "outbox_b", "outbox_b", "outbox"} {
				want = append(want, written{agg, insertVersioned(t, tx, table, agg, v+1)})
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	e.startStreaming("--table", "public.outbox", "--table", "public.outbox_b")
	inCommitOrder(t, c, want)
}

// TestMergedSnapshotResumesAfterKill: two tables holding alternate versions of the same aggregates, the
// router killed in the middle of their merged snapshot: the restart resumes each table after its own
// stored key, every row arrives, and each aggregate's versions are first delivered in version order.
func TestMergedSnapshotResumesAfterKill(t *testing.T) {
	e := twoOutboxes(t, true)
	c := e.consume(e.queue)
	const perTable = 10_000
	for i, table := range []string{"outbox", "outbox_b"} {
		e.exec(fmt.Sprintf(`INSERT INTO %s (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			SELECT gen_random_uuid(), 'order', 'agg-' || (g %% 100), 2 * (g / 100) + %d, 'created', '{}'
			FROM generate_series(0, %d) g`, table, i+1, perTable-1))
	}
	var rows []row
	for _, table := range []string{"outbox", "outbox_b"} {
		q, err := e.db.Query(context.Background(), `SELECT id::text FROM `+table)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(q, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			rows = append(rows, row{id: id})
		}
	}
	tables := []string{"--table", "public.outbox", "--table", "public.outbox_b"}
	r := e.start("", tables...)
	deadline := time.Now().Add(120 * time.Second)
	var a, b int64
	for a < 2000 || b < 2000 {
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot's stored progress stayed at %d and %d rows", a, b)
		}
		time.Sleep(50 * time.Millisecond)
		fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots WHERE name = $1`,
			"initial:"+e.slot+"/public.outbox"), &a)
		fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots WHERE name = $1`,
			"initial:"+e.slot+"/public.outbox_b"), &b)
	}
	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	if a >= perTable || b >= perTable {
		t.Fatalf("killed at %d and %d rows: the snapshot was not in the middle of both tables", a, b)
	}
	t.Logf("killed with %d and %d rows stored of %d each", a, b, perTable)
	r2 := e.start("", tables...)
	r2.waitLog("msg=streaming ", 120*time.Second)
	got := c.waitFor(t, rows, 60*time.Second)
	dups, _ := duplicates(got)
	t.Logf("%d events, %d deliveries, %d duplicates", len(rows), len(got), dups)
	checkOrder(t, got)
}
