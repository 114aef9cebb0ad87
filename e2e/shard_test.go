package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
)

// pgVersion is the server_version_num of the test cluster.
func (e *env) pgVersion() int {
	var v int
	if err := e.db.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		e.t.Fatal(err)
	}
	return v
}

// migrateShards runs `cdc-router migrate --shards n` and fails the test when it fails.
func (e *env) migrateShards(n int) {
	e.t.Helper()
	out, code := e.cli("migrate", "--shards", fmt.Sprint(n))
	if code != 0 {
		e.t.Fatalf("migrate --shards %d exited %d:\n%s", n, code, out)
	}
}

// startShards starts n routers, --shard 0/n ... --shard n-1/n, with extra flags, and waits until all stream.
func (e *env) startShards(n int, flags ...string) []*router {
	e.t.Helper()
	rs := make([]*router, n)
	for i := range n {
		rs[i] = e.start("", append([]string{"--shard", fmt.Sprintf("%d/%d", i, n)}, flags...)...)
	}
	for _, r := range rs {
		r.waitLog("msg=streaming ", 60*time.Second)
	}
	return rs
}

// TestShardedRoutersDeliverEveryEventInOrder: four routers, each with its own slot and row-filtered
// publication, deliver every event exactly once (no fault), the rows of their initial snapshots included,
// each aggregate's in order, and share the work.
func TestShardedRoutersDeliverEveryEventInOrder(t *testing.T) {
	e := newStreamEnv(t)
	if e.pgVersion() < 150000 {
		out, code := e.cli("migrate", "--shards", "4")
		if code == 0 || !strings.Contains(out, "they came with PostgreSQL 15") {
			t.Fatalf("migrate --shards on PostgreSQL 14 exited %d:\n%s", code, out)
		}
		return
	}
	e.migrateShards(4)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 200)
	w.write(1000, 100, 0) // before the slots: each shard's initial snapshot copies its own rows only
	rs := e.startShards(4)
	w.write(8000, 100, 0)
	got := c.waitFor(t, w.rows, 120*time.Second)
	time.Sleep(time.Second) // a duplicate would arrive right behind
	got = c.snapshot()
	if dups, _ := duplicates(got); dups != 0 {
		t.Errorf("%d duplicates without any fault", dups)
	}
	if extra := unexpected(got, w.rows); len(extra) > 0 {
		t.Errorf("%d deliveries of events never committed", len(extra))
	}
	checkOrder(t, got)
	slots := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name LIKE $1`, e.slot+`\_shard\_%\_of\_4`)
	if slots != "4" {
		t.Errorf("%s shard slots, want 4", slots)
	}
	// Each shard's share: the aggregates of one shard go through its router only.
	for i, r := range rs {
		if !strings.Contains(r.Output(), fmt.Sprintf("slot=%s_shard_%d_of_4", e.slot, i)) {
			t.Errorf("router %d does not run on its shard's slot", i)
		}
	}
	t.Logf("4 shards: %d events (1,000 of them by the initial snapshots), %d deliveries", len(w.rows), len(got))
}

// TestShardMismatchIsRefused: an unsharded run on a shard's publication, and a shard that does not exist.
func TestShardMismatchIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	if e.pgVersion() < 150000 {
		r := e.start("", "--shard", "0/2")
		r.expectExit(30*time.Second, "--shard 0/2 needs publication row filters", "PostgreSQL 15")
		return
	}
	e.migrateShards(2)
	r := e.start("", "--publication", "mine_shard_0_of_2")
	if code := r.wait(30 * time.Second); code != 2 || !strings.Contains(r.Output(), "run with --shard 0/2") {
		t.Errorf("a shard's publication without --shard exited %d, want 2 with --shard named:\n%s", code, tail(r.Output(), 5))
	}
	e.exec(`CREATE PUBLICATION mine FOR TABLE outbox WHERE (` + migrations.ShardFilter(0, 2) + `) WITH (publish = 'insert')`)
	r = e.start("", "--publication", "mine")
	r.expectExit(30*time.Second, "has a shard's row filter", "run it with --shard i/N")
	r = e.start("", "--shard", "1/4")
	r.expectExit(30*time.Second, `publication "cdc_router_outbox_shard_1_of_4" does not exist`)
	r = e.start("", "--shard", "2/2")
	if code := r.wait(30 * time.Second); code != 2 || !strings.Contains(r.Output(), "numbered from 0 to 1") {
		t.Errorf("--shard 2/2 exited %d, want 2 with the range named:\n%s", code, tail(r.Output(), 5))
	}
}

// TestReshardTwoToFour follows docs/scaling.md's procedure under running writers: migrate --shards 4,
// create the four new slots, wait until both old routers acknowledged past the new slots' start, stop the
// old routers, start the new ones with --snapshot never, drop the old slots. Nothing is lost, first
// deliveries stay in order per aggregate, and the only duplicates are events between the new slots' start
// and the old routers' stop.
func TestReshardTwoToFour(t *testing.T) {
	e := newStreamEnv(t)
	if e.pgVersion() < 150000 {
		t.Log("PostgreSQL 14: no shards (TestShardMismatchIsRefused covers the refusal)")
		return
	}
	ctx := context.Background()
	e.migrateShards(2)
	c := e.consume(e.queue)
	old := e.startShards(2)
	w := newWriter(t, e.pgURL, 200)
	var once sync.Once
	stopWriter := writeUntilStopped(w)
	stop := func() { once.Do(stopWriter) }
	defer stop()
	time.Sleep(2 * time.Second)

	e.migrateShards(4)
	var first, start cdc.LSN // where the first and the last new slot begin
	for i := range 4 {
		var lsn string
		err := e.db.QueryRow(ctx, `SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')`,
			migrations.ShardSlot(e.slot, i, 4)).Scan(&lsn)
		if err != nil {
			t.Fatal(err)
		}
		l, _ := cdc.ParseLSN(lsn)
		start = max(start, l)
		if first == 0 {
			first = l
		}
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		behind := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = ANY($1)
			AND confirmed_flush_lsn < $2::pg_lsn`, []string{migrations.ShardSlot(e.slot, 0, 2), migrations.ShardSlot(e.slot, 1, 2)}, start.String())
		if behind == "0" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the old routers did not acknowledge past %v within 60 s", start)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range old {
		r.signal(syscall.SIGTERM)
	}
	for _, r := range old {
		if code := r.wait(30 * time.Second); code != 0 {
			t.Fatalf("an old router exited %d", code)
		}
	}
	e.startShards(4, "--snapshot", "never")
	time.Sleep(2 * time.Second)
	stop()
	for i := range 2 {
		// The old slots hold the events committed since their routers stopped, which the new shards publish.
		if out, code := e.cli("reset", "--shard", fmt.Sprintf("%d/2", i), "--force"); code != 0 {
			t.Errorf("reset of an old shard's slot exited %d:\n%s", code, out)
		}
	}
	got := c.waitFor(t, w.rows, 120*time.Second)
	checkOrder(t, got)
	dups, _ := duplicates(got)
	count := map[string]int{}
	for _, d := range got {
		count[d.id]++
	}
	early := 0
	for _, d := range got {
		commit, _ := d.msg.Headers["commit_lsn"].(string)
		if l, _ := cdc.ParseLSN(commit); count[d.id] > 1 && (l < first || count[d.id] > 2) {
			early++
		}
	}
	if early > 0 {
		t.Errorf("%d duplicate deliveries of events before the first new slot's start %v, or more than twice", early, first)
	}
	t.Logf("reshard 2 -> 4: %d events, %d deliveries, %d duplicates (events between the new slots' start and the old routers' stop)",
		len(w.rows), len(got), dups)
}

// TestShardsHashAnyCollationAndQuarantineANullKey: key columns of two collations (aggregate_type COLLATE
// "C", aggregate_id COLLATE "POSIX") used to pass migrate --shards and the start-up check, then fail every
// insert in the walsender with 42P22; and a NULL key (aggregate_id made nullable while the shards run)
// matched no shard's filter, so both shards acknowledged past it. Now every event of such a table is
// delivered, and the NULL-key row belongs to shard 0, whose router quarantines it as the unsharded router
// does; shard 1 has no record of it.
func TestShardsHashAnyCollationAndQuarantineANullKey(t *testing.T) {
	e := newStreamEnv(t)
	if e.pgVersion() < 150000 {
		t.Log("PostgreSQL 14: no shards (TestShardMismatchIsRefused covers the refusal)")
		return
	}
	e.exec(`ALTER TABLE outbox ALTER COLUMN aggregate_type TYPE text COLLATE "C",
		ALTER COLUMN aggregate_id TYPE text COLLATE "POSIX"`)
	e.migrateShards(2)
	c := e.consume(e.queue)
	e.startShards(2)
	w := newWriter(t, e.pgURL, 50)
	w.write(200, 10, 0)
	c.waitFor(t, w.rows, 60*time.Second)
	e.exec(`ALTER TABLE outbox ALTER COLUMN aggregate_id DROP NOT NULL`)
	nullKey := e.insertHeaders("NULL", `'{}'`)
	after := e.currentLSN()
	w.write(200, 10, 0)
	c.waitFor(t, w.rows, 60*time.Second)
	got := e.waitQuarantined(1, 60*time.Second)
	if _, ok := got[nullKey]; !ok {
		t.Fatalf("quarantine records %v, want the NULL-key row %s", got, nullKey)
	}
	if slot := e.scalar(`SELECT string_agg(slot, ',') FROM cdc_router.quarantine`); slot != migrations.ShardSlot(e.slot, 0, 2) {
		t.Errorf("the NULL-key row was quarantined by %q, want shard 0's slot only", slot)
	}
	for i := range 2 {
		slot := migrations.ShardSlot(e.slot, i, 2)
		deadline := time.Now().Add(30 * time.Second)
		for {
			l, _ := cdc.ParseLSN(e.scalar(`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot))
			if l >= after {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("shard %d never acknowledged past the NULL-key row (at %v, want %v)", i, l, after)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}
