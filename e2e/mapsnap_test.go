package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbzID is the n-th id of a Debezium-shaped test table: uuids that sort in insertion order, so that
// the snapshot's primary key order is each key's insert order (a random uuid's is not).
func dbzID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012x", n) }

// dbzFill inserts rows from..to-1 into dbz_outbox over keys aggregates: id dbzID(n), key o-<n mod keys>,
// payload {"n": n}.
func dbzFill(e *env, from, to, keys int) {
	e.t.Helper()
	e.exec(fmt.Sprintf(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
		SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(n), 12, '0'))::uuid, 'Order', 'o-' || (n %% %d), 'Created',
		       jsonb_build_object('n', n)
		FROM generate_series(%d, %d) n`, keys, from, to-1))
}

// dbzWriter inserts rows from n on, five a transaction, until stopped; stop returns the next n.
func dbzWriter(t *testing.T, url string, n, keys int) (stop func() int) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			mu.Lock()
			_, err := conn.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
				SELECT ('00000000-0000-4000-8000-' || lpad(to_hex(n), 12, '0'))::uuid, 'Order', 'o-' || (n % $2), 'Created',
				       jsonb_build_object('n', n) FROM generate_series($1::int, $1::int + 4) n`, n, keys)
			if err == nil {
				n += 5
			}
			mu.Unlock()
			if err != nil {
				t.Errorf("writer: %v", err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return func() int {
		close(quit)
		<-done
		conn.Close(ctx)
		return n
	}
}

// mappedDelivery is a delivery of a mapped table: its message id, its key header, the n of its payload and
// whether it came from the snapshot.
type mappedDelivery struct {
	id, key  string
	n        int
	backfill bool
}

func mappedDeliveries(t *testing.T, c *consumer) []mappedDelivery {
	t.Helper()
	var out []mappedDelivery
	for _, d := range c.snapshot() {
		var body struct{ N int }
		if err := json.Unmarshal(d.msg.Body, &body); err != nil {
			t.Fatalf("message %s: body %q: %v", d.msg.MessageId, d.msg.Body, err)
		}
		key, _ := d.msg.Headers["key"].(string)
		out = append(out, mappedDelivery{d.msg.MessageId, key, body.N, d.msg.Headers["x-backfill"] == true})
	}
	return out
}

// waitDistinct waits until n distinct message ids arrived and no delivery came for half a second.
func waitDistinct(t *testing.T, c *consumer, n int, timeout time.Duration) []mappedDelivery {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ids := map[string]bool{}
		for _, d := range c.snapshot() {
			ids[d.msg.MessageId] = true
		}
		if len(ids) >= n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d distinct messages after %v, want %d", len(ids), timeout, n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	settled(c)
	return mappedDeliveries(t, c)
}

// checkMapped checks that the deliveries are exactly the rows 0..n-1 (each at least once), each key's
// rows in increasing n (first deliveries), and returns the duplicates and the snapshot's deliveries.
func checkMapped(t *testing.T, got []mappedDelivery, n int) (dups, snap int) {
	t.Helper()
	seen := map[string]bool{}
	last := map[string]int{}
	for _, d := range got {
		if d.backfill {
			snap++
		}
		if seen[d.id] {
			dups++
			continue
		}
		seen[d.id] = true
		if d.id != dbzID(d.n) || d.n >= n {
			t.Fatalf("message %s carries n %d: not a row the test wrote", d.id, d.n)
		}
		if p, ok := last[d.key]; ok && d.n <= p {
			t.Fatalf("key %s: row %d after row %d", d.key, d.n, p)
		}
		last[d.key] = d.n
	}
	if len(seen) != n {
		t.Fatalf("%d distinct rows delivered, want %d", len(seen), n)
	}
	return dups, snap
}

// TestMappedInitialSnapshot: a Debezium-shaped table (uuid id, jsonb payload) with 2,500 rows already in it
// (more than one page of 2,000) and rows written while the router starts: every row arrives exactly once
// across the handoff from the snapshot to the stream, each key's rows in order, and the job is done.
func TestMappedInitialSnapshot(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	c := e.consume(e.queue)
	dbzFill(e, 0, 2500, 40)
	stop := dbzWriter(t, e.pgURL, 2500, 40)
	time.Sleep(100 * time.Millisecond)
	r := e.start("", "--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--config", writeConfig(t, ""))
	r.waitLog("msg=streaming ", 60*time.Second)
	time.Sleep(time.Second)
	n := stop()
	got := waitDistinct(t, c, n, 90*time.Second)
	dups, snap := checkMapped(t, got, n)
	t.Logf("mapped initial snapshot: 2500 rows before start, %d written during, %d deliveries (%d from the snapshot), %d duplicates",
		n-2500, len(got), snap, dups)
	if dups != 0 {
		t.Errorf("%d duplicates at the handoff from snapshot to stream", dups)
	}
	if snap < 2500 || snap >= n {
		t.Errorf("%d snapshot rows of %d, want at least the 2500 there before the start, and streamed ones", snap, n)
	}
	if s := e.scalar(`SELECT state || ' ' || rows_done FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot); s != fmt.Sprintf("done %d", snap) {
		t.Errorf("snapshot job %q, want done with %d rows", s, snap)
	}
	if k := e.scalar(`SELECT last_key::text FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot); !strings.HasPrefix(k, `{"primary_key": ["00000000-0000-4000-8000-`) {
		t.Errorf("stored key %s, want the primary key", k)
	}
}

const pollerTable = `CREATE TABLE poller (
	id bigserial PRIMARY KEY,
	topic text NOT NULL,
	payload bytea NOT NULL,
	published_at timestamptz)`

const pollerConfig = "route.by.field=topic\nroute.topic.replacement=${routedByValue}\ntable.field.event.key=\ntable.field.event.payload=payload\n"

// TestMappedSnapshotWhere takes over from a poller (bigserial id, topic, bytea payload, published_at): with
// --snapshot-where 'published_at IS NULL' only the rows it had not published come from the snapshot, in
// id order, then the new ones are streamed.
func TestMappedSnapshotWhere(t *testing.T) {
	e := mappedEnv(t, "poller", pollerTable)
	c := e.consume(e.queue)
	e.exec(`INSERT INTO poller (topic, payload, published_at) SELECT 'orders', convert_to(n::text, 'UTF8'),
		CASE WHEN n <= 200 THEN now() END FROM generate_series(1, 300) n`)
	e.startStreaming("--table", "public.poller", "--publication", "poller_pub", "--config", writeConfig(t, pollerConfig),
		"--snapshot-where", "published_at IS NULL")
	e.exec(`INSERT INTO poller (topic, payload) SELECT 'orders', convert_to(n::text, 'UTF8') FROM generate_series(301, 310) n`)
	deadline := time.Now().Add(30 * time.Second)
	for len(c.snapshot()) < 110 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	settled(c)
	got := c.snapshot()
	if len(got) != 110 {
		t.Fatalf("%d deliveries, want the 100 unpublished rows and the 10 new ones only", len(got))
	}
	for i, d := range got {
		want := fmt.Sprint(201 + i)
		if d.msg.MessageId != want || string(d.msg.Body) != want || d.msg.RoutingKey != "orders" ||
			d.msg.ContentType != "application/octet-stream" || (d.msg.Headers["x-backfill"] == true) != (i < 100) {
			t.Fatalf("delivery %d: id %s body %q key %s content %s headers %v", i, d.msg.MessageId, d.msg.Body,
				d.msg.RoutingKey, d.msg.ContentType, d.msg.Headers)
		}
	}
}

// TestMappedSnapshotKilledResumes kills the router (SIGKILL) during the snapshot of a mapped table of 60,000
// rows: the restart resumes from the stored primary key, every row arrives, and the duplicates are fewer than
// the rows confirmed before the kill.
func TestMappedSnapshotKilledResumes(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	c := e.consume(e.queue)
	const total = 60_000
	dbzFill(e, 0, total, 1000)
	config := writeConfig(t, "")
	flags := []string{"--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--config", config}
	r := e.start("", flags...)
	deadline := time.Now().Add(120 * time.Second)
	var doneAtKill int64
	for doneAtKill < 5000 {
		if time.Now().After(deadline) {
			t.Fatalf("snapshot progress stayed at %d rows", doneAtKill)
		}
		time.Sleep(50 * time.Millisecond)
		fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot), &doneAtKill)
	}
	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	stored := e.scalar(`SELECT state || ' ' || rows_done || ' ' || last_key::text FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot)
	if !strings.HasPrefix(stored, "running ") {
		t.Fatalf("the snapshot finished before the kill (%s): make the table larger", stored)
	}
	first := settled(c)
	r2 := e.start("", flags...)
	r2.waitLog("resuming the initial snapshot", 30*time.Second)
	r2.waitLog("msg=streaming ", 240*time.Second)
	got := waitDistinct(t, c, total, 120*time.Second)
	dups, _ := checkMapped(t, got, total)
	t.Logf("mapped snapshot of %d rows killed with %s stored: %d delivered before the restart, %d after, %d duplicates",
		total, stored, first, len(got)-first, dups)
	if int64(dups) >= doneAtKill {
		t.Errorf("%d duplicates: the snapshot started over instead of resuming after row %d", dups, doneAtKill)
	}
	if s := e.scalar(`SELECT state FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot); s != "done" {
		t.Errorf("snapshot job %s, want done", s)
	}
}

// TestMappedSnapshotQuarantines: a row that cannot become an event (NULL route.by.field) met by the snapshot
// is a quarantine record with the table's own name, columns and primary key; the snapshot finishes.
func TestMappedSnapshotQuarantines(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	c := e.consume(e.queue)
	e.exec(`ALTER TABLE dbz_outbox ALTER COLUMN aggregatetype DROP NOT NULL`)
	dbzFill(e, 0, 30, 3)
	e.exec(`UPDATE dbz_outbox SET aggregatetype = NULL WHERE id = $1`, dbzID(7))
	e.startStreaming("--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--config", writeConfig(t, ""))
	deadline := time.Now().Add(30 * time.Second)
	for len(c.snapshot()) < 29 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := settled(c); n != 29 {
		t.Fatalf("%d deliveries, want the 29 good rows", n)
	}
	rec := e.scalar(`SELECT table_name || '|' || row_key || '|' || event_id || '|' || reason || '|' ||
		(SELECT string_agg(k, ',' ORDER BY k) FROM jsonb_object_keys(row_values) k) FROM cdc_router.quarantine`)
	want := "public.dbz_outbox|[\"" + dbzID(7) + "\"]|" + dbzID(7) + "|aggregatetype (route.by.field) is NULL, so the event has no routing key|" +
		"aggregateid,aggregatetype,created_at,id,payload,tracingspancontext,type"
	if rec != want {
		t.Errorf("quarantine record\n %s\nwant\n %s", rec, want)
	}
	if s := e.scalar(`SELECT state || ' ' || rows_done FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot); s != "done 30" {
		t.Errorf("snapshot job %q, want done with its 30 rows", s)
	}
}

// TestMappedSnapshotNeedsAKey: a mapped table without a primary key (or a unique index on NOT NULL columns)
// is refused before the slot is created, naming the fix; with --snapshot never it streams.
func TestMappedSnapshotNeedsAKey(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", strings.Replace(debeziumTable, "id uuid PRIMARY KEY", "id uuid", 1))
	flags := []string{"--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--config", writeConfig(t, "")}
	r := e.start("", flags...)
	r.expectExit(30*time.Second, `table public.dbz_outbox has no primary key, nor a unique index on NOT NULL columns`,
		`add a primary key (ALTER TABLE "public"."dbz_outbox" ADD PRIMARY KEY ("id")), or run with --snapshot never`)
	if n := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot); n != "0" {
		t.Errorf("the refused start created the slot")
	}
	e.startStreaming(append(flags, "--snapshot", "never")...)
}

// TestMappedBackfill re-publishes rows of a mapped table with `backfill --config`: the rows --where picks,
// in primary key order, marked x-backfill, mapped as the stream maps them; without a key it is refused.
func TestMappedBackfill(t *testing.T) {
	e := mappedEnv(t, "poller", pollerTable)
	c := e.consume(e.queue)
	e.exec(`INSERT INTO poller (topic, payload, published_at) SELECT 'orders', convert_to(n::text, 'UTF8'), now()
		FROM generate_series(1, 3000) n`)
	config := writeConfig(t, pollerConfig)
	out, code := e.cli("backfill", "--table", "public.poller", "--config", config, "--where", "id > 2500 OR id <= 10",
		"--exchange", e.exchange, "--name", "p")
	if code != 0 || !strings.Contains(out, "backfill p done: 510 rows") {
		t.Fatalf("backfill: exit %d\n%s", code, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(c.snapshot()) < 510 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	got := c.snapshot()
	if settled(c) != 510 {
		t.Fatalf("%d deliveries, want 510", len(c.snapshot()))
	}
	for i, d := range got {
		n := i + 1
		if i >= 10 {
			n = 2491 + i
		}
		if want := fmt.Sprint(n); d.msg.MessageId != want || string(d.msg.Body) != want || d.msg.Headers["x-backfill"] != true ||
			d.msg.RoutingKey != "orders" {
			t.Fatalf("delivery %d: id %s body %q key %s headers %v", i, d.msg.MessageId, d.msg.Body, d.msg.RoutingKey, d.msg.Headers)
		}
	}
	out, code = e.cli("backfill", "--table", "public.poller", "--where", "true", "--exchange", e.exchange, "--name", "n")
	if code == 0 || !strings.Contains(out, "table public.poller has no column aggregate_type, aggregate_id, aggregate_version, so it is "+
		"not in the native outbox shape: if run reads it with --config, give that file here too (--config FILE)") {
		t.Errorf("backfill without --config: exit %d\n%s", code, out)
	}
	e.exec(`ALTER TABLE poller DROP CONSTRAINT poller_pkey`)
	out, code = e.cli("backfill", "--table", "public.poller", "--config", config, "--where", "true", "--exchange", e.exchange, "--name", "q")
	if code == 0 || !strings.Contains(out, "has no primary key") || !strings.Contains(out, "add a primary key") {
		t.Errorf("backfill without a key: exit %d\n%s", code, out)
	}
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.snapshots WHERE name IN ('backfill:q', 'backfill:n')`); n != "0" {
		t.Errorf("a refused backfill recorded a job")
	}
}

// TestMappedQuarantineReplay: records of a mapped table (one quarantined by the snapshot, one by the stream)
// are replayed from their fixed rows, mapped as the stream maps them: without --config by the mapping the
// router recorded, with --config by that file; a record whose row is gone and whose stored values still fail
// is refused.
func TestMappedQuarantineReplay(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	c := e.consume(e.queue)
	e.exec(`ALTER TABLE dbz_outbox ALTER COLUMN aggregatetype DROP NOT NULL`)
	dbzFill(e, 0, 10, 3)
	e.exec(`UPDATE dbz_outbox SET aggregatetype = NULL WHERE id = $1`, dbzID(3))
	config := writeConfig(t, "")
	e.startStreaming("--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--config", config)
	dbzFill(e, 20, 22, 3)
	e.exec(`UPDATE dbz_outbox SET aggregatetype = NULL WHERE id IN ($1, $2)`, dbzID(20), dbzID(21)) // not streamed: updates are no events
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, NULL, 'o-9', 'Created', '{"n": 30}'),
		($2, NULL, 'o-9', 'Created', '{"n": 31}')`, dbzID(30), dbzID(31))
	deadline := time.Now().Add(30 * time.Second)
	for e.quarantined() != "3" && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := e.quarantined(); n != "3" {
		t.Fatalf("%s records, want 3 (row 3 from the snapshot, rows 30 and 31 streamed)", n)
	}
	settled(c)
	before := len(c.snapshot())
	e.exec(`UPDATE dbz_outbox SET aggregatetype = 'Order' WHERE id IN ($1, $2)`, dbzID(3), dbzID(30))
	e.exec(`DELETE FROM dbz_outbox WHERE id = $1`, dbzID(31))
	snapRec, streamRec, goneRec := e.recordID(dbzID(3)), e.recordID(dbzID(30)), e.recordID(dbzID(31))

	out, code := e.cli("quarantine", "replay", snapRec)
	if code != 0 || strings.Count(out, "replayed from the outbox table") != 1 {
		t.Fatalf("replay without --config, by the router's recorded mapping: exit %d\n%s", code, out)
	}
	out, code = e.cli("quarantine", "replay", "--exchange", e.exchange, "--config", config, "--table", "public.dbz_outbox",
		streamRec, goneRec)
	if code == 0 || strings.Count(out, "replayed from the outbox table") != 1 ||
		!strings.Contains(out, "its row is no longer in public.dbz_outbox and its stored values still cannot become an event (aggregatetype (route.by.field) is NULL") {
		t.Fatalf("replay with --config: exit %d\n%s", code, out)
	}
	deadline = time.Now().Add(10 * time.Second)
	for len(c.snapshot()) < before+2 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	got := c.snapshot()[before:]
	if len(got) != 2 {
		t.Fatalf("%d replayed deliveries, want 2", len(got))
	}
	for _, d := range got {
		var body struct{ N int }
		json.Unmarshal(d.msg.Body, &body)
		if d.msg.Headers["x-replayed"] != true || d.msg.RoutingKey != "outbox.event.Order" || d.msg.MessageId != dbzID(body.N) ||
			d.msg.Headers["id"] != d.msg.MessageId || d.msg.Headers["key"] == nil {
			t.Errorf("replayed delivery: id %s key %s body %s headers %v", d.msg.MessageId, d.msg.RoutingKey, d.msg.Body, d.msg.Headers)
		}
	}
	if h := e.scalar(`SELECT string_agg(handled_how, ',' ORDER BY id) FROM cdc_router.quarantine WHERE handled_how IS NOT NULL`); h != "replayed,replayed" {
		t.Errorf("handled: %s", h)
	}
}

// TestNativeAndMappedSnapshotInOneRouter: the initial snapshot of a router of a native and a mapped table
// copies both, each with its own job and its own shape (the native table by its aggregate key, the mapped
// one by its primary key and through its mapping).
func TestNativeAndMappedSnapshotInOneRouter(t *testing.T) {
	e := newStreamEnv(t)
	e.exec(debeziumTable)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE dbz_outbox`)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 10)
	w.prefill(300, "")
	dbzFill(e, 0, 2100, 7)
	config := writeConfig(t, "table=public.dbz_outbox\nroute.topic.replacement=dbz.${routedByValue}\n")
	e.startStreaming("--table", "public.outbox", "--table", "public.dbz_outbox", "--config", config)
	deadline := time.Now().Add(60 * time.Second)
	for len(c.snapshot()) < 2400 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := settled(c); n != 2400 {
		t.Fatalf("%d deliveries, want the 300 native and 2100 mapped rows", n)
	}
	native, mapped := 0, 0
	for _, d := range c.snapshot() {
		switch {
		case d.msg.RoutingKey == "dbz.Order" && d.msg.Headers["aggregate_version"] == nil && d.msg.Headers["x-backfill"] == true:
			mapped++
		case d.msg.RoutingKey == "order.created" && d.msg.Headers["aggregate_version"] != nil && d.msg.Headers["x-backfill"] == true:
			native++
		default:
			t.Fatalf("delivery %s: routing key %s headers %v", d.msg.MessageId, d.msg.RoutingKey, d.msg.Headers)
		}
	}
	if native != 300 || mapped != 2100 {
		t.Errorf("%d native and %d mapped snapshot rows, want 300 and 2100", native, mapped)
	}
	jobs := e.scalar(`SELECT string_agg(name || ' ' || state || ' ' || rows_done, ', ' ORDER BY name) FROM cdc_router.snapshots`)
	if want := fmt.Sprintf("initial:%[1]s/public.dbz_outbox done 2100, initial:%[1]s/public.outbox done 300", e.slot); jobs != want {
		t.Errorf("jobs %s, want %s", jobs, want)
	}
}
