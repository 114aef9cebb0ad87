package snapshot

import (
	"context"
	"testing"
	"time"
)

// TestCopyMergedInterleavesTables: the outbox holds the odd versions of each aggregate, outbox_b the even
// ones; the merged copy (pages of 7 rows, so pages end inside aggregates and tables) publishes every row
// once, each aggregate in version order across both tables, and stores each table's job as done with its
// own row count and last key.
func TestCopyMergedInterleavesTables(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 0, 0)
	for _, sql := range []string{
		`CREATE TABLE outbox_b (LIKE outbox INCLUDING ALL)`,
		`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			SELECT gen_random_uuid(), 'order', 'a' || a, 2 * v - 1, 'created', '{}'
			FROM generate_series(1, 5) a, generate_series(1, 6) v`,
		`INSERT INTO outbox_b (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			SELECT gen_random_uuid(), 'order', 'a' || a, 2 * v, 'created', '{}'
			FROM generate_series(1, 5) a, generate_series(1, 6) v`,
	} {
		if _, err := state.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	cfgs := []Config{{Table: "public.outbox", PageSize: 7, Slot: "s"}, {Table: "public.outbox_b", PageSize: 7, Slot: "s"}}
	if why, err := Mergeable(ctx, cfgs, read); err != nil || why != "" {
		t.Fatalf("Mergeable = %q, %v; want two native tables mergeable", why, err)
	}
	list := []Job{newJob(t, state, "m/a", ""), newJob(t, state, "m/b", "")}
	for i := range list {
		list[i].RowsTotal = 30
	}
	pub := &fakePublisher{failed: make(chan struct{})}
	reps := []*Reporter{NewReporter(quiet, nil, "m/a", 0), NewReporter(quiet, nil, "m/b", 0)}
	if err := CopyMerged(ctx, cfgs, read, NewJobs(state, "cdc_router"), list, pub, reps); err != nil {
		t.Fatal(err)
	}
	if len(pub.events) != 60 {
		t.Fatalf("published %d events, want 60", len(pub.events))
	}
	last := map[string]int64{}
	for _, ev := range pub.events {
		if ev.AggregateVersion != last[ev.AggregateID]+1 {
			t.Fatalf("%s: v%d after v%d", ev.AggregateID, ev.AggregateVersion, last[ev.AggregateID])
		}
		last[ev.AggregateID] = ev.AggregateVersion
	}
	for _, name := range []string{"m/a", "m/b"} {
		stored, _, _ := NewJobs(state, "cdc_router").Load(ctx, name)
		if !stored.Done() || stored.RowsDone != 30 || stored.LastKey == nil || stored.LastKey.AggregateID != "a5" {
			t.Fatalf("job %s stored as %+v, want done with 30 rows up to a5", name, stored)
		}
	}
}

// TestCopyMergedCost: the merged copy reads each table's page and keeps the first rows of all of them, so
// it reads up to (tables x page) rows per page published; this logs its time next to Copy of each table
// on 2 x 20,000 rows, and checks only that it is not out of proportion (under 4x).
func TestCopyMergedCost(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 200, 100)
	if _, err := state.Exec(ctx, `CREATE TABLE outbox_b (LIKE outbox INCLUDING ALL);
		INSERT INTO outbox_b SELECT gen_random_uuid(), aggregate_type, aggregate_id, aggregate_version + 100, event_type,
			schema_version, payload, headers, occurred_at FROM outbox`); err != nil {
		t.Fatal(err)
	}
	cfgs := []Config{{Table: "public.outbox", Slot: "s"}, {Table: "public.outbox_b", Slot: "s"}}
	began := time.Now()
	for i, cfg := range cfgs {
		job := newJob(t, state, []string{"c/a", "c/b"}[i], "")
		if _, err := Copy(ctx, cfg, read, NewJobs(state, "cdc_router"), job, &fakePublisher{failed: make(chan struct{})},
			NewReporter(quiet, nil, job.Name, 0)); err != nil {
			t.Fatal(err)
		}
	}
	single := time.Since(began)
	list := []Job{newJob(t, state, "m/a", ""), newJob(t, state, "m/b", "")}
	for i := range list {
		list[i].RowsTotal = 20_000
	}
	began = time.Now()
	pub := &fakePublisher{failed: make(chan struct{})}
	if err := CopyMerged(ctx, cfgs, read, NewJobs(state, "cdc_router"), list, pub,
		[]*Reporter{NewReporter(quiet, nil, "m/a", 0), NewReporter(quiet, nil, "m/b", 0)}); err != nil {
		t.Fatal(err)
	}
	merged := time.Since(began)
	t.Logf("2 x 20,000 rows: one table after the other %v, merged %v", single.Round(time.Millisecond), merged.Round(time.Millisecond))
	if len(pub.events) != 40_000 {
		t.Fatalf("merged copy published %d events, want 40000", len(pub.events))
	}
	if merged > 4*single+time.Second {
		t.Errorf("the merged copy took %v, the copy of one table after the other %v", merged, single)
	}
}
