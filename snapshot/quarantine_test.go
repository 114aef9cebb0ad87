package snapshot

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// records returns the quarantine records as "row_key|reason|event_id", oldest first.
func records(t *testing.T, state *pgx.Conn) []string {
	t.Helper()
	rows, err := state.Query(context.Background(), `SELECT row_key || '|' || reason || '|' || coalesce(event_id, '')
		FROM cdc_router.quarantine ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func copyAll(t *testing.T, read, state *pgx.Conn, name string, cfg Config, pub *fakePublisher) Job {
	t.Helper()
	job := newJob(t, state, name, "")
	done, err := Copy(context.Background(), cfg, read, NewJobs(state, "cdc_router"), job, pub, NewReporter(quiet, nil, name, 0))
	if err != nil {
		t.Fatal(err)
	}
	return done
}

// TestKeysThatUsedToCollide: ('a/b','c',1) and ('a','b/c',1), both bad, are two records.
func TestKeysThatUsedToCollide(t *testing.T) {
	read, state := setup(t, 0, 0)
	_, err := state.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version,
		event_type, payload, headers) VALUES (gen_random_uuid(), 'a/b', 'c', 1, 'e', '{}', '[1]'),
		(gen_random_uuid(), 'a', 'b/c', 1, 'e', '{}', '[2]')`)
	if err != nil {
		t.Fatal(err)
	}
	pub := &fakePublisher{failed: make(chan struct{})}
	copyAll(t, read, state, "k", Config{Slot: "s"}, pub)
	got := records(t, state)
	if len(got) != 2 || !strings.HasPrefix(got[0], `["a","b/c",1]|`) || !strings.HasPrefix(got[1], `["a/b","c",1]|`) {
		t.Fatalf("records %q, want one per row", got)
	}
}

// TestRefusedEventIsQuarantined: the publisher refuses one event as unpublishable; it is quarantined with
// the refusal as its reason, every other row is published, and the job finishes with all rows done.
func TestRefusedEventIsQuarantined(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 2, 6)
	pub := &fakePublisher{failed: make(chan struct{}), refuse: func(ev cdc.Event) error {
		if ev.AggregateID == "a1" && ev.AggregateVersion == 4 {
			return fmt.Errorf("%w: header CC is reserved by RabbitMQ", cdc.ErrUnpublishable)
		}
		return nil
	}}
	done := copyAll(t, read, state, "r", Config{Slot: "backfill:r", PageSize: 5}, pub)
	if len(pub.events) != 11 || done.RowsDone != 12 || !done.Done() {
		t.Fatalf("published %d, job %+v; want 11 published and 12 done", len(pub.events), done)
	}
	got := records(t, state)
	var id string
	state.QueryRow(ctx, "SELECT id::text FROM outbox WHERE aggregate_id = 'a1' AND aggregate_version = 4").Scan(&id)
	if want := `["order","a1",4]|event cannot be published: header CC is reserved by RabbitMQ|` + id; len(got) != 1 || got[0] != want {
		t.Fatalf("records %q, want %q", got, want)
	}
	var payload, slot string
	state.QueryRow(ctx, "SELECT row_values->>'payload', slot FROM cdc_router.quarantine").Scan(&payload, &slot)
	if payload != `{"v": 4}` || slot != "backfill:r" {
		t.Fatalf("stored payload %q, slot %q", payload, slot)
	}
}

// TestNullKeysAreNeverSkipped: with nullable key columns (the setup check refuses them, but a copy must not
// rely on it), rows with a NULL key part anywhere in key order are quarantined, each on its own, and every
// other row is published once.
func TestNullKeysAreNeverSkipped(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 4, 2)
	_, err := state.Exec(ctx, `ALTER TABLE outbox ALTER COLUMN aggregate_type DROP NOT NULL,
			ALTER COLUMN aggregate_id DROP NOT NULL, ALTER COLUMN aggregate_version DROP NOT NULL;
		INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload) VALUES
			(gen_random_uuid(), NULL, 'x', 1, 'e', '{}'), (gen_random_uuid(), NULL, 'x', 1, 'e', '{}'),
			(gen_random_uuid(), 'order', NULL, 1, 'e', '{}'), (gen_random_uuid(), 'a', 'b', NULL, 'e', '{}'),
			(gen_random_uuid(), 'zzz', 'z', 1, 'e', '{}')`)
	if err != nil {
		t.Fatal(err)
	}
	left, err := Count(ctx, Config{}, read, &Key{AggregateType: "order", AggregateID: "a1", Version: 2})
	if err != nil || left != 11 {
		t.Fatalf("Count after a1 v2 = %d, %v; want 7 complete keys after it and the 4 with a NULL", left, err)
	}
	pub := &fakePublisher{failed: make(chan struct{})}
	done := copyAll(t, read, state, "n", Config{Slot: "s", PageSize: 3}, pub)
	if len(pub.events) != 9 || done.RowsDone != 13 {
		t.Fatalf("published %d, %d rows done; want 9 and 13", len(pub.events), done.RowsDone)
	}
	got := records(t, state)
	if len(got) != 4 {
		t.Fatalf("records %q, want the 4 rows with a NULL key part", got)
	}
	for _, r := range got {
		if !strings.Contains(r, `"ctid (`) || !strings.Contains(r, "is NULL") {
			t.Fatalf("record %q, want a ctid key and a NULL reason", r)
		}
	}
	stored, _, _ := NewJobs(state, "cdc_router").Load(ctx, "n")
	if stored.LastKey == nil || !reflect.DeepEqual(*stored.LastKey, Key{AggregateType: "zzz", AggregateID: "z", Version: 1}) || stored.RowsDone != 13 {
		t.Fatalf("stored progress %+v", stored)
	}
}
