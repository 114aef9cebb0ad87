package snapshot

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
)

// setupMapped makes a database with the router's tables and the table that ddl creates, and returns a
// reader connection set as pgserver.ConnectReader sets it and a state connection.
func setupMapped(t *testing.T, ddl string) (read, state *pgx.Conn) {
	t.Helper()
	read, state = setup(t, 0, 0)
	if _, err := read.Exec(context.Background(), "SET bytea_output = hex; SET IntervalStyle = postgres; SET extra_float_digits = 3"); err != nil {
		t.Fatal(err)
	}
	if _, err := state.Exec(context.Background(), ddl); err != nil {
		t.Fatal(err)
	}
	return read, state
}

// mappedConfig reads table through options (a --config file's text).
func mappedConfig(t *testing.T, table, options string) Config {
	t.Helper()
	m, err := mapping.ParseMapping(options)
	if err != nil {
		t.Fatal(err)
	}
	return Config{Table: table, Slot: "s", Decode: decode.Config{Table: table, Mapping: m}}
}

// pollerTable is a generic poller's outbox: a bigserial id, a topic, a bytea payload, published_at.
const pollerTable = `CREATE TABLE poller (id bigserial PRIMARY KEY, topic text, payload bytea, published_at timestamptz);
	INSERT INTO poller (topic, payload, published_at)
	SELECT 'orders.' || (n % 3), convert_to('{"n":' || n || '}', 'UTF8'), CASE WHEN n <= 5 THEN now() END
	FROM generate_series(1, 25) n`

const pollerMapping = "route.by.field=topic\nroute.topic.replacement=${routedByValue}\ntable.field.event.key=\ntable.field.event.payload=payload\n"

// TestMappedCopyPagesByPrimaryKey: a mapped table is read in pages of its primary key's order (7 rows a page,
// so "10" < "9" as text would show), each row mapped as the stream maps it, the progress stored as the
// primary key.
func TestMappedCopyPagesByPrimaryKey(t *testing.T) {
	ctx := context.Background()
	read, state := setupMapped(t, pollerTable)
	cfg := mappedConfig(t, "public.poller", pollerMapping)
	cfg.PageSize = 7
	job := newJob(t, state, "m1", "")
	pub := &fakePublisher{failed: make(chan struct{})}
	done, err := Copy(ctx, cfg, read, NewJobs(state, "cdc_router"), job, pub, NewReporter(quiet, nil, job.Name, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.events) != 25 || done.RowsDone != 25 || !done.Done() {
		t.Fatalf("published %d, done %+v; want 25 rows and a finished job", len(pub.events), done)
	}
	for i, ev := range pub.events {
		want := strings.Replace(`{"n":N}`, "N", ev.ID, 1)
		if ev.ID != strconv.Itoa(i+1) || string(ev.Payload) != want || ev.Mapped == nil || ev.Mapped.RoutingKey != ev.AggregateType ||
			ev.Mapped.ContentType != "application/octet-stream" || !ev.Backfill || ev.CommitLSN != 0x1000 {
			t.Fatalf("event %d: %+v %+v", i, ev, ev.Mapped)
		}
	}
	stored, _, _ := NewJobs(state, "cdc_router").Load(ctx, "m1")
	if stored.LastKey == nil || !reflect.DeepEqual(stored.LastKey.PrimaryKey, []string{"25"}) {
		t.Fatalf("stored key %+v", stored.LastKey)
	}
	var raw string
	state.QueryRow(ctx, `SELECT last_key::text FROM cdc_router.snapshots WHERE name = 'm1'`).Scan(&raw)
	if raw != `{"primary_key": ["25"]}` {
		t.Errorf("stored form %s", raw)
	}
}

func itoa(n int) string {
	return strings.TrimSpace(strings.Replace("  N", "N", string(rune('0'+n/10))+string(rune('0'+n%10)), 1))
}

// TestMappedCopyResumesAndFilters: a job with a stored primary key publishes only the rows after it that
// match the predicate (published_at IS NULL: rows 6..25), and a key stored in the native form starts over.
func TestMappedCopyResumesAndFilters(t *testing.T) {
	ctx := context.Background()
	read, state := setupMapped(t, pollerTable)
	cfg := mappedConfig(t, "public.poller", pollerMapping)
	cfg.Where, cfg.PageSize = "published_at IS NULL", 4
	jobs := NewJobs(state, "cdc_router")
	for _, tt := range []struct {
		key   Key
		first string
		n     int
	}{{Key{PrimaryKey: []string{"9"}}, "10", 16}, {Key{AggregateType: "x", AggregateID: "y", Version: 1}, "6", 20}} {
		job := newJob(t, state, "m2", cfg.Where)
		if err := jobs.Progress(ctx, "m2", tt.key, 0, 0); err != nil {
			t.Fatal(err)
		}
		job, _, _ = jobs.Load(ctx, "m2")
		if n, err := Count(ctx, cfg, read, job.LastKey); err != nil || n != int64(tt.n) {
			t.Fatalf("Count after %+v = %d, %v; want %d", tt.key, n, err, tt.n)
		}
		pub := &fakePublisher{failed: make(chan struct{})}
		if _, err := Copy(ctx, cfg, read, jobs, job, pub, NewReporter(quiet, nil, "m2", 0)); err != nil {
			t.Fatal(err)
		}
		if len(pub.events) != tt.n || pub.events[0].ID != tt.first {
			t.Fatalf("after %+v: %d events from %s, want %d from %s", tt.key, len(pub.events), pub.events[0].ID, tt.n, tt.first)
		}
	}
}

// TestMappedCopyQuarantinesWithRealColumns: a row that cannot become an event (NULL route.by.field) is a
// quarantine record with the table's own name, column names and primary key; a dropped tombstone counts as
// done; the copy finishes.
func TestMappedCopyQuarantinesWithRealColumns(t *testing.T) {
	ctx := context.Background()
	read, state := setupMapped(t, pollerTable+`; UPDATE poller SET topic = NULL WHERE id = 3; UPDATE poller SET payload = NULL WHERE id = 4`)
	cfg := mappedConfig(t, "public.poller", pollerMapping+"route.tombstone.on.empty.payload=true\namqp.tombstone=drop\n")
	cfg.PageSize = 10
	job := newJob(t, state, "m3", "")
	pub := &fakePublisher{failed: make(chan struct{})}
	done, err := Copy(ctx, cfg, read, NewJobs(state, "cdc_router"), job, pub, NewReporter(quiet, nil, "m3", 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(pub.events) != 23 || done.RowsDone != 25 || !done.Done() {
		t.Fatalf("published %d, done %+v; want 23 published and 25 done", len(pub.events), done)
	}
	var table, key, reason, id string
	var cols []string
	err = state.QueryRow(ctx, `SELECT table_name, row_key, reason, event_id, (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(row_values) k)
		FROM cdc_router.quarantine`).Scan(&table, &key, &reason, &id, &cols)
	if err != nil {
		t.Fatal(err)
	}
	if table != "public.poller" || key != `["3"]` || id != "3" || !strings.Contains(reason, "topic (route.by.field) is NULL") ||
		!reflect.DeepEqual(cols, []string{"id", "payload", "published_at", "topic"}) {
		t.Fatalf("record %s %s %s %q %v", table, key, id, reason, cols)
	}
}

// TestMappedKeyChoice: the primary key, else a unique index on NOT NULL columns (composite keys page in
// their order); a table with neither is refused with the fix.
func TestMappedKeyChoice(t *testing.T) {
	ctx := context.Background()
	read, state := setupMapped(t, `
		CREATE TABLE nokey (id uuid, aggregatetype text, aggregateid text, type text, payload jsonb);
		CREATE TABLE nullable_unique (id uuid UNIQUE, aggregatetype text, aggregateid text, type text, payload jsonb);
		CREATE TABLE unique_notnull (id uuid, aggregatetype text NOT NULL, seq int NOT NULL, aggregateid text, type text, payload jsonb,
			UNIQUE (aggregatetype, seq));
		INSERT INTO unique_notnull SELECT gen_random_uuid(), t, s, 'a', 'e', '{}' FROM unnest(array['b','a']) t, generate_series(1, 11) s`)
	for _, table := range []string{"public.nokey", "public.nullable_unique"} {
		err := CheckTable(ctx, mappedConfig(t, table, ""), read)
		if !errors.Is(err, ErrNoKey) || !strings.Contains(err.Error(), "add a primary key (ALTER TABLE") ||
			!strings.Contains(err.Error(), "--snapshot never") {
			t.Fatalf("%s: %v, want the refusal naming the fix", table, err)
		}
		t.Log(err)
	}
	cfg := mappedConfig(t, "public.unique_notnull", "")
	cfg.PageSize = 5
	job := newJob(t, state, "m4", "")
	pub := &fakePublisher{failed: make(chan struct{})}
	if _, err := Copy(ctx, cfg, read, NewJobs(state, "cdc_router"), job, pub, NewReporter(quiet, nil, "m4", 0)); err != nil {
		t.Fatal(err)
	}
	if len(pub.events) != 22 || pub.events[0].AggregateType != "a" || pub.events[11].AggregateType != "b" {
		t.Fatalf("%d events, want 22, a's first", len(pub.events))
	}
	stored, _, _ := NewJobs(state, "cdc_router").Load(ctx, "m4")
	if !reflect.DeepEqual(stored.LastKey.PrimaryKey, []string{"b", "11"}) {
		t.Fatalf("stored key %+v", stored.LastKey)
	}
	err := CheckTable(ctx, mappedConfig(t, "public.unique_notnull", "table.field.event.payload=body"), read)
	var mErr *decode.MappingError
	if !errors.As(err, &mErr) || !strings.Contains(err.Error(), "column body (table.field.event.payload) is missing") {
		t.Fatalf("a table that does not fit: %v", err)
	}
}

// TestStoredKeyForms: both stored forms parse, and a native key stored by an older version still does.
func TestStoredKeyForms(t *testing.T) {
	for stored, want := range map[string]Key{
		`["order","o-1",3]`:                          {AggregateType: "order", AggregateID: "o-1", Version: 3},
		`["order","o-1",3,"2026-12-01 10:00:00+00"]`: {AggregateType: "order", AggregateID: "o-1", Version: 3, Partition: []string{"2026-12-01 10:00:00+00"}},
		`{"primary_key": ["b", "11"]}`:               {PrimaryKey: []string{"b", "11"}},
	} {
		k, err := parseKey([]byte(stored))
		if err != nil || !reflect.DeepEqual(k, want) {
			t.Errorf("parseKey(%s) = %+v, %v", stored, k, err)
		}
		if again, err := parseKey(k.stored()); err != nil || !reflect.DeepEqual(again, want) {
			t.Errorf("round trip of %s: %+v, %v", stored, again, err)
		}
	}
	for _, bad := range []string{`{}`, `{"primary_key": 1}`, `["a"]`} {
		if _, err := parseKey([]byte(bad)); err == nil {
			t.Errorf("parseKey(%s) accepted", bad)
		}
	}
}
