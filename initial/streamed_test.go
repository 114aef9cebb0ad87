package initial

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/snapshot"
)

// collected is a publisher that confirms every event at once and keeps them in order.
type collected struct {
	mu     sync.Mutex
	events []cdc.Event
	failed chan struct{}
}

func (c *collected) Publish(ctx context.Context, ev cdc.Event, done func()) error {
	c.mu.Lock()
	c.events = append(c.events, ev)
	c.mu.Unlock()
	go done()
	return nil
}
func (c *collected) Failed() <-chan struct{} { return c.failed }
func (c *collected) Err() error              { return nil }

// streamed is what the stream would deliver from the slot's consistent point: the slot's changes, read
// without consuming them, decoded by the stream's own decoder.
type streamed struct{ events []cdc.Event }

func (s *streamed) Begin(cdc.LSN) error              { return nil }
func (s *streamed) Event(ev cdc.Event) error         { s.events = append(s.events, ev); return nil }
func (s *streamed) Quarantine(cdc.Quarantined) error { return nil }
func (s *streamed) Commit(cdc.LSN, cdc.LSN) error    { return nil }

// eventID is the event id of version v of aggregate agg in these tests, so that a delivery names both.
func eventID(agg, v int) string { return fmt.Sprintf("00000000-0000-4000-8000-%04d%08d", agg, v) }

// TestResumedCopyLeavesWhatTheSlotStreams (the randomized harness's seeds 7155 and 9483, and 9431): an
// initial snapshot resumed in a new snapshot, of a mapped table (copied whole before: it has no record of
// the slot's snapshot to judge rows by) or of a slot with no record at all, sees the rows committed after
// the slot's creation. Aggregate 1's version 4 was inserted and deleted by its own transaction after the
// slot was created (an insert-delete outbox), so only the stream has it; versions 5 and 6 came after it.
// Copied too, 5 and 6 were first delivered before the stream's 4. The resumed copy leaves out what the slot
// will stream, so that every aggregate's first deliveries (the copy's, then the stream's) come in version
// order, and every version is delivered.
func TestResumedCopyLeavesWhatTheSlotStreams(t *testing.T) {
	for _, c := range []struct {
		name   string
		mapped bool // the table of chaos/mapped.go, read through its mapping; else the native outbox
		fresh  bool // the slot has no record (its creation's reply lost); else its job was recorded and cut
	}{
		{"mapped table, its copy cut", true, false},
		{"native outbox, a slot without a record", false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			conn := routerDB(t)
			table := "public.outbox"
			insert := func(agg, v int) string {
				return fmt.Sprintf(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
					VALUES ('%s', 'order', 'a%d', %d, 'created', '{}')`, eventID(agg, v), agg, v)
			}
			cfg := Config{PGURL: conn.Config().ConnString(), PGTimeout: 5 * time.Second, Slot: "s", Schema: "cdc_router",
				Snapshot: "initial", SnapshotPageSize: 2}
			if c.mapped {
				table = "public.mapped_outbox"
				_, err := conn.Exec(ctx, `CREATE TABLE mapped_outbox (seq bigserial PRIMARY KEY, id uuid NOT NULL UNIQUE,
						aggregatetype varchar(255), aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL,
						version bigint NOT NULL, payload jsonb);
					ALTER PUBLICATION cdc_router_outbox ADD TABLE mapped_outbox`)
				if err != nil {
					t.Fatal(err)
				}
				insert = func(agg, v int) string {
					return fmt.Sprintf(`INSERT INTO mapped_outbox (id, aggregatetype, aggregateid, type, version, payload)
						VALUES ('%s', 'mapped', 'a%d', 'created', %d, '{}')`, eventID(agg, v), agg, v)
				}
				m, err := mapping.ParseMapping("table=" + table + "\ntable.fields.additional.placement=aggregatetype:header:" +
					"aggregate_type,aggregateid:header:aggregate_id,version:header:aggregate_version\n")
				if err != nil {
					t.Fatal(err)
				}
				cfg.Decode.Mapping = m
			}
			cfg.Table, cfg.Decode.Table, cfg.Decode.Publication = table, table, "cdc_router_outbox"
			cfg.Decode.MaxPayloadBytes = 1 << 20
			exec := func(q string) {
				t.Helper()
				if _, err := conn.Exec(ctx, q); err != nil {
					t.Fatal(err)
				}
			}
			for v := 1; v <= 3; v++ { // before the slot: the copy's alone
				exec(insert(1, v))
			}
			exec(insert(2, 1))
			var point string
			if err := conn.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot('s', 'pgoutput')`).Scan(&point); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Exec(context.Background(), `SELECT pg_drop_replication_slot('s')`) })
			start, err := cdc.ParseLSN(point)
			if err != nil {
				t.Fatal(err)
			}
			store := offsets.NewStore(conn, "cdc_router", "s", time.Second)
			pos := offsets.Position{LSN: start, SystemID: "7300000000000000001", Timeline: 1}
			if !c.fresh { // recorded when the slot was created, then cut before its first page
				if err := record(ctx, conn, snapshot.NewJobs(conn, "cdc_router"), store, []Job{{table: table, job: jobAt(cfg, table, start)}}, nil, pos); err != nil {
					t.Fatal(err)
				}
			}
			// After the slot's creation: version 4 inserted and deleted by its own transaction, then 5 and 6;
			// aggregate 2's version 2.
			del := "DELETE FROM " + table + " WHERE id = '" + eventID(1, 4) + "'"
			exec("BEGIN; " + insert(1, 4) + "; " + del + "; COMMIT")
			exec(insert(1, 5))
			exec(insert(1, 6))
			exec(insert(2, 2))

			todo, fresh, err := Due(ctx, cfg, conn, start, !c.fresh)
			if err != nil || fresh != c.fresh || len(todo) != 1 {
				t.Fatalf("Due = %d jobs, fresh %v, %v; want 1, fresh %v", len(todo), fresh, err, c.fresh)
			}
			var logs strings.Builder
			log := slog.New(slog.NewTextHandler(&logs, nil))
			pub := &collected{failed: make(chan struct{})}
			if err := Finish(ctx, cfg, log, &metrics.Stats{}, conn, store, pos, todo, fresh, pub); err != nil {
				t.Fatal(err)
			}
			stream := &streamed{}
			dec := decode.New(cfg.Decode)
			rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes('s', NULL, NULL,
				'proto_version', '1', 'publication_names', 'cdc_router_outbox')`)
			if err != nil {
				t.Fatal(err)
			}
			for rows.Next() {
				var at string
				var data []byte
				if err := rows.Scan(&at, &data); err != nil {
					t.Fatal(err)
				}
				lsn, _ := cdc.ParseLSN(at)
				if err := dec.Decode(lsn, data, stream); err != nil {
					t.Fatal(err)
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			// First deliveries per aggregate: the copy's, then (streaming starts once the copy is confirmed) the stream's.
			var copied, got []string
			first := map[string]bool{}
			last := map[int]int{}
			for i, ev := range append(append([]cdc.Event{}, pub.events...), stream.events...) {
				var agg, v int
				if _, err := fmt.Sscanf(ev.ID[len(ev.ID)-12:], "%04d%08d", &agg, &v); err != nil {
					t.Fatalf("event id %q: %v", ev.ID, err)
				}
				d := fmt.Sprintf("a%d v%d", agg, v)
				if i < len(pub.events) {
					copied = append(copied, d)
				}
				if first[d] {
					continue
				}
				first[d] = true
				got = append(got, d)
				if v < last[agg] {
					t.Errorf("a%d: version %d first delivered after version %d (copied %v; first deliveries %v)", agg, v, last[agg],
						copied, got)
				}
				last[agg] = max(last[agg], v)
			}
			if want := 8; len(got) != want {
				t.Errorf("%d versions delivered (%v), want %d", len(got), got, want)
			}
			if !strings.Contains(logs.String(), "the rows the slot will stream are left to it") {
				t.Errorf("the resumed copy did not say it leaves the stream's rows to it:\n%s", logs.String())
			}
		})
	}
}

// jobAt is the initial snapshot job of table as Copy records it when it creates the slot at lsn.
func jobAt(cfg Config, table string, lsn cdc.LSN) snapshot.Job {
	return snapshot.Job{Name: cfg.initialName(table), Kind: "initial", Predicate: cfg.SnapshotWhere, ReadLSN: lsn}
}
