package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests of a partitioned outbox (`migrate --partitioned`, docs/partitioning.md) are named
// TestPartitioned... so that `-run TestPartitioned` picks them for each PostgreSQL version.

// newPartitionedEnv is newStreamEnv with the outbox and publication replaced by those of
// `cdc-router migrate --partitioned` with flags.
func newPartitionedEnv(t *testing.T, flags ...string) *env {
	t.Helper()
	e := newStreamEnv(t)
	e.exec(`DROP PUBLICATION cdc_router_outbox; DROP TABLE outbox`)
	out, code := e.cli(append([]string{"migrate", "--amqp-url=", "--partitioned"}, flags...)...)
	if code != 0 || !strings.Contains(out, "partitioned: public.outbox by occurred_at") {
		t.Fatalf("migrate --partitioned exited %d:\n%s", code, out)
	}
	if kind := e.scalar(`SELECT relkind::text FROM pg_class WHERE oid = 'public.outbox'::regclass`); kind != "p" {
		t.Fatalf("outbox relkind %q after migrate --partitioned, want p", kind)
	}
	t.Logf("PostgreSQL %s", e.scalar(`SHOW server_version`))
	return e
}

// insertAt commits n outbox rows in one transaction, each version 1 of an aggregate of its own, with
// occurred_at = at (an SQL expression), and returns them.
func (e *env) insertAt(n int, at string) []row {
	e.t.Helper()
	rows := make([]row, n)
	ids, aggs := make([]string, n), make([]string, n)
	for i := range rows {
		rows[i] = row{id: uuid(), aggType: "order", aggID: "p-" + uuid(), version: 1}
		ids[i], aggs[i] = rows[i].id, rows[i].aggID
	}
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, occurred_at)
		SELECT id, 'order', a, 1, 'created', jsonb_build_object('agg', a), `+at+` FROM unnest($1::uuid[], $2::text[]) AS r(id, a)`,
		ids, aggs)
	return rows
}

// expectOnceInOrder waits for every row, and wants each delivered once, nothing else delivered, and each
// aggregate's versions in order.
func expectOnceInOrder(t *testing.T, c *consumer, rows []row, timeout time.Duration) []delivery {
	t.Helper()
	got := c.waitFor(t, rows, timeout)
	time.Sleep(500 * time.Millisecond)
	got = c.snapshot()
	if dups, ids := duplicates(got); dups != 0 {
		t.Errorf("%d duplicates, e.g. %v", dups, ids[:min(3, len(ids))])
	}
	if extra := unexpected(got, rows); len(extra) > 0 {
		t.Errorf("%d deliveries of rows never written, e.g. %v", len(extra), extra[:min(3, len(extra))])
	}
	checkOrder(t, got)
	return got
}

// noRestarts fails when the router's stream stopped or refused anything.
func noRestarts(t *testing.T, r *router) {
	t.Helper()
	for _, bad := range []string{"stream stopped", "refusing", "level=ERROR"} {
		if strings.Contains(r.Output(), bad) {
			t.Errorf("the router logged %q:\n%s", bad, tail(r.Output(), 30))
		}
	}
}

// TestPartitionedInitialSnapshotAndStream: rows already spread over several partitions (the initial
// snapshot) and rows written while the router starts and streams all arrive once, under the outbox's
// name, in version order per aggregate.
func TestPartitionedInitialSnapshotAndStream(t *testing.T) {
	e := newPartitionedEnv(t, "--partition-interval", "day", "--partitions-ahead", "3")
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 50)
	w.prefill(5000, "")
	// spread the snapshot's rows over today's, tomorrow's and the default partition
	e.exec(`UPDATE outbox SET occurred_at = occurred_at + interval '1 day' WHERE aggregate_version % 3 = 1`)
	e.exec(`UPDATE outbox SET occurred_at = occurred_at + interval '1 year' WHERE aggregate_version % 3 = 2`)
	if n := e.scalar(`SELECT count(DISTINCT tableoid)::text FROM outbox`); n != "3" {
		t.Fatalf("the snapshot's rows are in %s partitions, want 3", n)
	}
	before := len(w.rows)
	stop := writeUntilStopped(w)
	r := e.start("")
	r.waitLog("msg=streaming ", 60*time.Second)
	time.Sleep(time.Second)
	stop()
	got := expectOnceInOrder(t, c, w.rows, 90*time.Second)
	snap := 0
	for _, d := range got {
		if d.msg.Headers["x-backfill"] == true {
			snap++
		}
		if table, _ := d.msg.Headers["table"].(string); table != "" && table != "public.outbox" {
			t.Fatalf("event %s carries table %q, want public.outbox", d.id, table)
		}
	}
	t.Logf("%d rows before the start in 3 partitions, %d written during: %d deliveries, %d from the snapshot",
		before, len(w.rows)-before, len(got), snap)
	if snap < before {
		t.Errorf("%d snapshot rows, want at least the %d that were there before the start", snap, before)
	}
	noRestarts(t, r)
}

// TestPartitionedAttachAndDropWhileStreaming: while writers run, partitions are attached (CREATE, then
// ATTACH PARTITION; one with its columns in another order), created (migrate --partitioned, PARTITION OF)
// and written to at once, and an old
// partition is detached and dropped, another dropped directly: every row arrives once, the router never
// stops (no drift refusal for the new partitions, nothing from the DDL), and nothing else arrives.
func TestPartitionedAttachAndDropWhileStreaming(t *testing.T) {
	e := newPartitionedEnv(t, "--partition-interval", "day", "--partitions-ahead", "1")
	e.exec(`CREATE TABLE outbox_y2020m01 PARTITION OF outbox FOR VALUES FROM ('2020-01-01+00') TO ('2020-02-01+00')`)
	e.exec(`CREATE TABLE outbox_y2020m02 PARTITION OF outbox FOR VALUES FROM ('2020-02-01+00') TO ('2020-03-01+00')`)
	c := e.consume(e.queue)
	r := e.startStreaming()
	w := newWriter(t, e.pgURL, 20)
	stop := writeUntilStopped(w)
	extra := e.insertAt(5, `'2020-01-15+00'`)
	extra = append(extra, e.insertAt(5, `'2020-02-15+00'`)...)
	e.exec(`CREATE TABLE outbox_y2100m01 (LIKE outbox INCLUDING DEFAULTS)`)
	e.exec(`ALTER TABLE outbox ATTACH PARTITION outbox_y2100m01 FOR VALUES FROM ('2100-01-01+00') TO ('2100-02-01+00')`)
	extra = append(extra, e.insertAt(5, `'2100-01-15+00'`)...)
	if out, code := e.cli("migrate", "--amqp-url=", "--partitioned", "--partition-interval", "day", "--partitions-ahead", "6"); code != 0 {
		t.Fatalf("migrate --partitioned while streaming exited %d:\n%s", code, out)
	}
	extra = append(extra, e.insertAt(5, `now() + interval '5 days'`)...)
	e.exec(`CREATE TABLE outbox_y2100m02 PARTITION OF outbox FOR VALUES FROM ('2100-02-01+00') TO ('2100-03-01+00')`)
	extra = append(extra, e.insertAt(5, `'2100-02-15+00'`)...)
	// a partition whose columns are in another order, with a dropped one: PostgreSQL converts its rows to
	// the root's columns
	e.exec(`CREATE TABLE outbox_y2100m03 (gone int, occurred_at timestamptz NOT NULL, headers jsonb NOT NULL DEFAULT '{}',
		payload jsonb NOT NULL, schema_version int NOT NULL DEFAULT 1, event_type text NOT NULL,
		aggregate_version bigint NOT NULL, aggregate_id text NOT NULL, aggregate_type text NOT NULL, id uuid NOT NULL)`)
	e.exec(`ALTER TABLE outbox_y2100m03 DROP COLUMN gone`)
	e.exec(`ALTER TABLE outbox ATTACH PARTITION outbox_y2100m03 FOR VALUES FROM ('2100-03-01+00') TO ('2100-04-01+00')`)
	mixed := e.insertAt(5, `'2100-03-15+00'`)
	extra = append(extra, mixed...)
	c.waitFor(t, extra, 30*time.Second)
	e.exec(`ALTER TABLE outbox DETACH PARTITION outbox_y2020m01`)
	e.exec(`DROP TABLE outbox_y2020m01`)
	e.exec(`DROP TABLE outbox_y2020m02`)
	extra = append(extra, e.insertAt(5, `'2100-01-20+00'`)...)
	time.Sleep(time.Second)
	stop()
	all := append(append([]row(nil), w.rows...), extra...)
	got := expectOnceInOrder(t, c, all, 60*time.Second)
	if parts := e.scalar(`SELECT count(*)::text FROM pg_inherits WHERE inhparent = 'outbox'::regclass`); parts != "11" {
		t.Errorf("%s partitions, want 11: 7 days, 3 of 2100 and the default (none of 2020)", parts)
	}
	for _, d := range got {
		if d.id != mixed[0].id {
			continue
		}
		var body map[string]any
		json.Unmarshal(d.msg.Body, &body)
		h := d.msg.Headers
		if d.msg.RoutingKey != "order.created" || body["agg"] != mixed[0].aggID || h["aggregate_id"] != mixed[0].aggID ||
			h["aggregate_version"] != int64(1) || h["schema_version"] != int32(1) {
			t.Errorf("a row of the partition with reordered columns: key %q body %s headers %v", d.msg.RoutingKey, d.msg.Body, h)
		}
	}
	t.Logf("%d rows by the writers and %d into attached, created and dropped partitions: %d deliveries",
		len(w.rows), len(extra), len(got))
	noRestarts(t, r)
}

// TestPartitionedRowsOfADroppedPartitionStillArrive: rows the router had not read yet when their partition
// was dropped (the router stopped; retention ran) are still decoded from the WAL and arrive.
func TestPartitionedRowsOfADroppedPartitionStillArrive(t *testing.T) {
	e := newPartitionedEnv(t)
	e.exec(`CREATE TABLE outbox_y2020m01 PARTITION OF outbox FOR VALUES FROM ('2020-01-01+00') TO ('2020-02-01+00')`)
	c := e.consume(e.queue)
	r := e.startStreaming()
	r.signal(syscall.SIGTERM)
	if code := r.wait(30 * time.Second); code != 0 {
		t.Fatalf("router exited %d on SIGTERM", code)
	}
	rows := e.insertAt(20, `'2020-01-15+00'`)
	e.exec(`ALTER TABLE outbox DETACH PARTITION outbox_y2020m01`)
	e.exec(`DROP TABLE outbox_y2020m01`)
	rows = append(rows, e.insertAt(5, `now()`)...)
	r2 := e.startStreaming()
	expectOnceInOrder(t, c, rows, 30*time.Second)
	noRestarts(t, r2)
}

// TestPartitionedPublicationWithoutViaRootIsRefused: a publication of the partitioned outbox without
// publish_via_partition_root is refused at the start with the ALTER PUBLICATION that fixes it; after the
// fix the router streams.
func TestPartitionedPublicationWithoutViaRootIsRefused(t *testing.T) {
	e := newPartitionedEnv(t)
	e.exec(`ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = false)`)
	c := e.consume(e.queue)
	r := e.start("")
	r.expectExit(30*time.Second, `ALTER PUBLICATION "cdc_router_outbox" SET (publish_via_partition_root = true)`)
	if n := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot); n != "0" {
		t.Errorf("the refused start created the slot")
	}
	e.exec(`ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = true)`)
	e.startStreaming()
	expectOnceInOrder(t, c, e.insertAt(10, `now()`), 30*time.Second)
}

// TestPartitionedLeafNamedRowsAreNeverDropped: when publish_via_partition_root is turned off under a
// running router, inserts arrive under a partition's name. The router refuses them (it does not skip or
// acknowledge them) naming the fix; after the fix and one start with --on-drift=quarantine, each such row
// is either delivered or in the quarantine (PostgreSQL decodes them with the publication of their time, so
// they stay partition-named: quarantined), the rows written after are delivered, and `quarantine replay`
// publishes the quarantined ones from the outbox.
func TestPartitionedLeafNamedRowsAreNeverDropped(t *testing.T) {
	e := newPartitionedEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	first := e.insertAt(3, `now()`)
	c.waitFor(t, first, 30*time.Second)
	e.exec(`ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = false)`)
	leafNamed := e.insertAt(3, `now()`)
	r.expectExit(30*time.Second, "is in the publication but is not the outbox table",
		"SET (publish_via_partition_root = true)")
	for _, d := range c.snapshot() {
		for _, l := range leafNamed {
			if d.id == l.id {
				t.Fatalf("row %s, sent under a partition's name, was published", l.id)
			}
		}
	}
	e.exec(`ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = true)`)
	// The publication's options changed between two checks, which the router cannot tell from publish =
	// 'insert' turned off and on: it refuses to start until the gap is cleared. No row was lost here (they
	// came under the partitions' names and were refused), so the operator clears it as the refusal says.
	e.start("").expectExit(30*time.Second, "may have been out of publication", "SET gaps = NULL")
	e.exec(`UPDATE cdc_router.publication_checks SET gaps = NULL WHERE slot = $1`, e.slot)
	e.startStreaming("--on-drift=quarantine")
	after := e.insertAt(3, `now()`)
	c.waitFor(t, after, 30*time.Second)
	delivered := map[string]bool{}
	for _, d := range c.snapshot() {
		delivered[d.id] = true
	}
	quarantined, published := 0, 0
	for _, l := range leafNamed {
		q := e.scalar(`SELECT count(*)::text FROM cdc_router.quarantine WHERE event_id = $1`, l.id)
		switch {
		case delivered[l.id]:
			published++
		case q == "1":
			quarantined++
		default:
			t.Errorf("row %s, written while the publication sent partition names, is neither delivered nor quarantined", l.id)
		}
	}
	t.Logf("rows written while publish_via_partition_root was off: %d quarantined, %d delivered", quarantined, published)
	var records []string
	for _, l := range leafNamed {
		if !delivered[l.id] {
			records = append(records, e.recordID(l.id))
		}
	}
	if len(records) > 0 {
		out, code := e.cli(append([]string{"quarantine", "replay", "--exchange", e.exchange}, records...)...)
		if code != 0 || !strings.Contains(out, "replayed from the outbox table") {
			t.Fatalf("quarantine replay of the partition-named rows: exit %d\n%s", code, out)
		}
	}
	c.waitFor(t, leafNamed, 30*time.Second)
}

// TestPartitionedBackfillAfterRetention: after an old partition is dropped, a backfill by time range
// republishes the retained rows it selects, each once and in version order per aggregate, and nothing of
// the dropped partition (those rows are gone: nothing can publish them again).
func TestPartitionedBackfillAfterRetention(t *testing.T) {
	e := newPartitionedEnv(t)
	e.exec(`CREATE TABLE outbox_y2020m01 PARTITION OF outbox FOR VALUES FROM ('2020-01-01+00') TO ('2020-02-01+00')`)
	c := e.consume(e.queue)
	e.startStreaming()
	old := e.insertAt(20, `'2020-01-15+00'`)
	w := newWriter(t, e.pgURL, 10)
	w.write(500, 20, 0)
	c.waitFor(t, append(append([]row(nil), old...), w.rows...), 30*time.Second)
	e.exec(`DROP TABLE outbox_y2020m01`)
	out, code := e.cli("backfill", "--where", "occurred_at >= now() - interval '1 day'", "--exchange", e.exchange,
		"--name", "retained")
	if code != 0 {
		t.Fatalf("backfill: exit %d\n%s", code, out)
	}
	backfilled := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(backfilled) < len(w.rows) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		clear(backfilled)
		for _, d := range c.snapshot() {
			if d.msg.Headers["x-backfill"] == true {
				backfilled[d.id]++
			}
		}
	}
	var got []delivery
	for _, d := range c.snapshot() {
		if d.msg.Headers["x-backfill"] == true {
			got = append(got, d)
		}
	}
	checkOrder(t, got)
	for _, r := range w.rows {
		if backfilled[r.id] != 1 {
			t.Fatalf("retained row %s backfilled %d times, want once", r.id, backfilled[r.id])
		}
	}
	for _, r := range old {
		if backfilled[r.id] != 0 {
			t.Fatalf("row %s of the dropped partition was backfilled", r.id)
		}
	}
	if len(got) != len(w.rows) {
		t.Errorf("%d backfilled deliveries, want the %d retained rows", len(got), len(w.rows))
	}
}

// TestPartitionedConversionFromAPlainOutbox runs the procedure of docs/partitioning.md ("Moving a plain
// outbox to a partitioned one") between two runs of the router on the same slot: the copied rows are not
// published again, and every row written after arrives once, in order.
func TestPartitionedConversionFromAPlainOutbox(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	w := newWriter(t, e.pgURL, 10)
	w.write(300, 20, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	r.signal(syscall.SIGTERM)
	if code := r.wait(30 * time.Second); code != 0 {
		t.Fatalf("router exited %d on SIGTERM", code)
	}
	e.exec(`ALTER TABLE public.outbox RENAME TO outbox_plain`)
	e.exec(`ALTER PUBLICATION cdc_router_outbox DROP TABLE public.outbox_plain`)
	if out, code := e.cli("migrate", "--amqp-url=", "--partitioned"); code != 0 {
		t.Fatalf("migrate --partitioned: exit %d\n%s", code, out)
	}
	e.exec(`INSERT INTO public.outbox SELECT * FROM public.outbox_plain`)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE public.outbox`)
	e.exec(`ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = true)`)
	// A new outbox table: a publication gap, which the stopped writers make empty (docs/partitioning.md).
	e.start("").expectExit(30*time.Second, "may have been out of publication", "SET gaps = NULL")
	e.exec(`UPDATE cdc_router.publication_checks SET gaps = NULL WHERE slot = $1`, e.slot)
	r2 := e.startStreaming()
	w.write(300, 20, 0)
	expectOnceInOrder(t, c, w.rows, 30*time.Second)
	noRestarts(t, r2)
}

// TestPartitionedViaRootTurnedOffIsNoticed: the publication watch names the option, not ADD TABLE, when
// publish_via_partition_root is turned off under a router that has no row to refuse yet: /readyz turns 503
// with the ALTER PUBLICATION that fixes it, and ready again after the fix.
func TestPartitionedViaRootTurnedOffIsNoticed(t *testing.T) {
	e := newPartitionedEnv(t)
	addr := freeAddr(t)
	r := e.startStreaming("--http-addr", addr, "--publication-check-interval", "500ms")
	e.exec(`ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = false)`)
	r.waitLog("no longer streamed", 10*time.Second)
	code, body := get(t, "http://"+addr+"/readyz")
	if code != 503 || !strings.Contains(body, "publish_via_partition_root = true") || strings.Contains(body, "ADD TABLE") {
		t.Fatalf("/readyz = %d %s, want 503 naming SET (publish_via_partition_root = true)", code, body)
	}
	e.exec(`ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = true)`)
	deadline := time.Now().Add(10 * time.Second)
	for code != 200 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		code, body = get(t, "http://"+addr+"/readyz")
	}
	if code != 200 {
		t.Fatalf("/readyz = %d %s after the fix, want 200", code, body)
	}
}
