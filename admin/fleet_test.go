package admin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// TestFleetShowsEverySlotAndRecord: status without a slot shows, in text and JSON, a slot whose live
// router streams (with its standby, their differing settings, its configuration, quarantine and unfinished
// snapshot), a slot whose router stopped, a slot no cdc-router recorded, and a record whose slot was
// dropped, whose process was not heard from since; a slot of another output plugin is not listed. The
// process that speaks for a slot is listed first.
func TestFleetShowsEverySlotAndRecord(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	db := c.Config().Database // slots named after the database are dropped when the test ends
	live, stopped, bare, gone, other := db+"_live", db+"_stopped", db+"_bare", db+"_gone", db+"_td"
	run := func(sql string, args ...any) {
		t.Helper()
		if _, err := c.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	for _, s := range []string{live, stopped, bare, gone} {
		run(`SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, s)
	}
	run(`SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, other)
	run(`SELECT pg_drop_replication_slot($1)`, gone)
	record := `INSERT INTO cdc_router.routers (slot, instance, role, publication, tables, mappings, message_prefix, shard,
		exchange, settings, version, host, pid, started_at, heartbeat_at, stopped_at, last_error)
		VALUES ($1, $2, $3, $4, $5, $6, 'app.events', $7, 'events', $8, 'v1.2.3', $9, $10, now() - interval '1 hour',
			now() - $11::interval, CASE WHEN $12 THEN now() - interval '5 minutes' END, nullif($13, ''))`
	run(record, live, "a/1/1", "streaming", "orders_pub", []string{"public.outbox", "billing.outbox"},
		map[string]string{"billing.outbox": "table.field.event.id=uuid\n"}, "1/2",
		map[string]string{"exchange": "events", "batch": "100"}, "host-a", 101, "2 seconds", false, "")
	run(record, live, "b/2/1", "standby", "orders_pub", []string{"public.outbox", "billing.outbox"},
		map[string]string{"billing.outbox": "table.field.event.id=uuid\n"}, "1/2",
		map[string]string{"exchange": "audit", "batch": "100", "aggregate-window": "64"}, "host-b", 202, "3 seconds", false, "")
	run(record, stopped, "c/3/1", "stopped", "stopped_pub", []string{"public.outbox"}, map[string]string{}, "",
		map[string]string{}, "host-c", 303, "5 minutes", true, "broker refused the credentials")
	run(record, gone, "d/4/1", "streaming", "gone_pub", []string{"public.outbox"}, map[string]string{}, "",
		map[string]string{}, "host-d", 404, "10 minutes", false, "")
	// The publishing of the streaming process (migration 019), and of a process not heard from for 10
	// minutes: shown for the live one only.
	run(`UPDATE cdc_router.routers SET window_limit = 37, inflight_events = 5 WHERE instance IN ('a/1/1', 'd/4/1')`)
	run(`INSERT INTO cdc_router.quarantine (slot, lsn, row_key, table_name, reason, handled_at) VALUES
		($1, '0/1', '', 'public.outbox', 'bad', NULL), ($1, '0/2', '', 'public.outbox', 'bad', now()),
		('backfill:b1', '0/3', '', 'public.outbox', 'bad', NULL)`, live)
	run(`INSERT INTO cdc_router.snapshots (name, kind, read_lsn, rows_done, rows_total, state)
		VALUES ('initial:' || $1, 'initial', '0/1', 5, 10, 'running')`, live)

	f, err := Fleet(ctx, c, "cdc_router")
	if err != nil {
		t.Fatal(err)
	}
	text := f.String()
	t.Logf("status:\n%s", text)
	blocks := map[string]string{}
	for _, b := range strings.Split(text, "\n\n") {
		if _, rest, ok := strings.Cut(b, "slot:             "); ok {
			name, _, _ := strings.Cut(rest, "\n")
			blocks[name] = b
		}
	}
	if len(blocks) != 4 || blocks[other] != "" {
		t.Fatalf("%d slot blocks (%v), want 4 without the test_decoding slot", len(blocks), blocks)
	}
	for slot, want := range map[string][]string{
		live: {"router:           streaming", "processes:        host-a pid 101, streaming, heard 2 s ago, 5 events unconfirmed of an in-flight limit of 37, version v1.2.3",
			"host-b pid 202, standby, heard 3 s ago", "publication:      orders_pub", "tables:           public.outbox, billing.outbox",
			"message prefix:   app.events", "shard:            1/2", "mapped tables:    billing.outbox", "slot active:      no",
			"quarantined rows: 1 not handled (2 in all)", "snapshot:         initial:" + live + " interrupted, 5/10 rows",
			"settings differ:  the live processes of this slot run with different aggregate-window, exchange:"},
		stopped: {"router:           stopped at ", "host-c pid 303, stopped at ", "last error: broker refused the credentials",
			"publication:      stopped_pub", "quarantined rows: 0 not handled (0 in all)"},
		bare: {"router:           no record: no cdc-router recorded this slot", "slot active:      no"},
		gone: {"slot exists:      no: this database has no pgoutput slot of that name", "router:           not heard from since ",
			"(10m0s ago)", "host-d pid 404, streaming when last heard from"},
	} {
		for _, w := range want {
			if !strings.Contains(blocks[slot], w) {
				t.Errorf("the block of %s lacks %q:\n%s", slot, w, blocks[slot])
			}
		}
	}
	if strings.Contains(blocks[gone], "in-flight limit") {
		t.Errorf("the publishing of a process not heard from for 10 minutes is shown:\n%s", blocks[gone])
	}
	if strings.Contains(blocks[bare], "publication:") || strings.Contains(blocks[gone], "slot active:") {
		t.Errorf("a fact shown that does not apply:\n%s\n\n%s", blocks[bare], blocks[gone])
	}
	if !strings.Contains(text, "backfills' quarantined rows: 1 not handled (1 in all)") {
		t.Errorf("no line of the backfills' quarantine:\n%s", text)
	}

	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		SchemaVersion int `json:"schema_version"`
		Slots         []map[string]any
	}
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	t.Logf("json: %s", b)
	if got.SchemaVersion != FleetSchemaVersion || len(got.Slots) != 4 {
		t.Fatalf("schema_version %d, %d slots; want %d and 4", got.SchemaVersion, len(got.Slots), FleetSchemaVersion)
	}
	bySlot := map[string]map[string]any{}
	for _, s := range got.Slots {
		bySlot[s["slot"].(string)] = s
	}
	for slot, want := range map[string]map[string]any{
		live:    {"state": "streaming", "slot_exists": true, "active": false, "publication": "orders_pub", "shard": "1/2"},
		stopped: {"state": "stopped", "slot_exists": true, "publication": "stopped_pub"},
		bare:    {"state": "no_record", "slot_exists": true, "publication": nil, "message_prefix": nil},
		gone:    {"state": "stale", "slot_exists": false, "active": nil, "lag_bytes": nil, "wal_status": nil},
	} {
		for k, v := range want {
			if bySlot[slot][k] != v {
				t.Errorf("%s: %s = %#v, want %#v", slot, k, bySlot[slot][k], v)
			}
		}
	}
	s := bySlot[live]
	if n := len(s["processes"].([]any)); n != 2 {
		t.Errorf("%s: %d processes, want 2", live, n)
	}
	if d := s["settings_differ"].([]any); len(d) != 2 || d[0] != "aggregate-window" || d[1] != "exchange" {
		t.Errorf("%s: settings_differ %v", live, d)
	}
	if q := s["quarantine"].(map[string]any); q["open"] != 1.0 || q["total"] != 2.0 {
		t.Errorf("%s: quarantine %v", live, q)
	}
	if m := s["mapped_tables"].([]any); len(m) != 1 || m[0] != "billing.outbox" {
		t.Errorf("%s: mapped_tables %v", live, m)
	}
	if j := s["jobs"].([]any); len(j) != 1 {
		t.Errorf("%s: jobs %v, want the initial snapshot", live, j)
	}
	p := bySlot[gone]["processes"].([]any)[0].(map[string]any)
	if p["live"] != false || p["stopped_at"] != nil || p["heartbeat_age_seconds"].(float64) < 590 || p["window_limit"] != nil {
		t.Errorf("%s: process %v, want not live, not stopped, 10 minutes silent, no window_limit", gone, p)
	}
	for _, x := range s["processes"].([]any) {
		p := x.(map[string]any)
		want := map[string]any{"window_limit": nil, "inflight_events": nil}
		if p["instance"] == "a/1/1" {
			want = map[string]any{"window_limit": 37.0, "inflight_events": 5.0}
		}
		for k, v := range want {
			if p[k] != v {
				t.Errorf("%s: process %v: %s = %#v, want %#v", live, p["instance"], k, p[k], v)
			}
		}
	}
	for _, key := range []string{"processes", "tables", "mapped_tables", "jobs", "settings_differ"} {
		if l, ok := bySlot[bare][key].([]any); !ok || len(l) != 0 {
			t.Errorf("%s: %s = %#v, want []", bare, key, bySlot[bare][key])
		}
	}
}
