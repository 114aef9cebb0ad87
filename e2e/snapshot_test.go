package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// prefill inserts n rows over the writer's aggregates with SQL alone (fast) and teaches the writer about
// them, so later writes continue each aggregate's versions.
func (w *writer) prefill(n int, extra string) {
	w.t.Helper()
	ctx := context.Background()
	_, err := w.db.Exec(ctx, fmt.Sprintf(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		SELECT gen_random_uuid(), 'order', 'agg-' || lpad((g %% %d)::text, 3, '0'), (g / %d) + 1, 'created',
		       jsonb_build_object('n', g, 'agg', 'agg-' || lpad((g %% %d)::text, 3, '0')), '{}'
		FROM generate_series(0, %d) g %s`, w.aggs, w.aggs, w.aggs, n-1, extra))
	if err != nil {
		w.t.Fatal(err)
	}
	rows, err := w.db.Query(ctx, `SELECT id::text, aggregate_type, aggregate_id, aggregate_version FROM outbox`)
	if err != nil {
		w.t.Fatal(err)
	}
	defer rows.Close()
	w.rows = w.rows[:0]
	for rows.Next() {
		var r row
		rows.Scan(&r.id, &r.aggType, &r.aggID, &r.version)
		w.rows = append(w.rows, r)
		w.versions[r.aggID] = max(w.versions[r.aggID], r.version)
	}
}

// TestInitialSnapshotHasNoGapAndNoOverlap: rows already in the table and rows written while the snapshot
// runs all arrive exactly once, snapshot rows first per aggregate, marked and stamped with the consistent point.
func TestInitialSnapshotHasNoGapAndNoOverlap(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 100)
	w.prefill(20_000, "")
	before := len(w.rows)
	stop := writeUntilStopped(w) // concurrent writers during slot creation, the snapshot and the handoff
	time.Sleep(100 * time.Millisecond)
	r := e.start("")
	r.waitLog("msg=streaming ", 60*time.Second)
	time.Sleep(time.Second)
	stop()
	got := c.waitFor(t, w.rows, 90*time.Second)
	dups, _ := duplicates(got)
	snap, point := 0, ""
	for _, d := range got {
		if d.msg.Headers["x-backfill"] == true {
			snap++
			point, _ = d.msg.Headers["commit_lsn"].(string)
		}
	}
	t.Logf("initial snapshot: %d rows before start, %d written during, %d deliveries (%d from the snapshot at %s), %d duplicates",
		before, len(w.rows)-before, len(got), snap, point, dups)
	if dups != 0 {
		t.Errorf("%d duplicates at the handoff from snapshot to stream", dups)
	}
	if snap < before || snap >= len(got) {
		t.Errorf("%d snapshot rows of %d, want at least the %d rows that were there before the start, and streamed ones",
			snap, len(got), before)
	}
	if p, _ := cdc.ParseLSN(point); p == 0 {
		t.Errorf("snapshot rows carry commit_lsn %q, want the slot's consistent point", point)
	}
	checkOrder(t, got)
	out, _ := e.cli("status", "--slot", e.slot)
	if !strings.Contains(out, "initial:"+e.slot+" done") {
		t.Errorf("status does not show the finished snapshot:\n%s", out)
	}
}

// TestSnapshotWherePredicateForCutover takes over from a polling publisher: only the rows it had not
// published yet come from the snapshot.
func TestSnapshotWherePredicateForCutover(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.exec(`ALTER TABLE outbox ADD COLUMN published_at timestamptz`)
	w := newWriter(t, e.pgURL, 10)
	w.prefill(1000, "")
	e.exec(`UPDATE outbox SET published_at = now() WHERE aggregate_version <= 50`) // the poller's share
	var pending []row
	for _, r := range w.rows {
		if r.version > 50 {
			pending = append(pending, r)
		}
	}
	r := e.start("", "--snapshot-where", "published_at IS NULL")
	r.waitLog("msg=streaming ", 60*time.Second)
	mark := len(w.rows)
	w.write(100, 10, 0)
	want := append(pending, w.rows[mark:]...)
	got := c.waitFor(t, want, 60*time.Second)
	time.Sleep(500 * time.Millisecond)
	got = c.snapshot()
	if len(got) != len(want) {
		t.Fatalf("%d deliveries, want the %d unpublished rows and the %d new ones only", len(got), len(pending), len(w.rows)-mark)
	}
	checkOrder(t, got)
}

// TestSnapshotCrashResumesFromTheLastKey kills the router during a snapshot of 200,000 rows: the restart
// resumes from the stored key (it does not start over) and every row arrives. The rows belong to 1,000
// aggregates, 200 each: an aggregate with more rows than a lane's window makes the snapshot publish one
// of its rows per confirm round trip (ADR 0006), which is not what this test is about.
func TestSnapshotCrashResumesFromTheLastKey(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 1000)
	w.prefill(200_000, "")
	addr := freeAddr(t)
	r := e.start("", "--http-addr", addr)
	deadline := time.Now().Add(120 * time.Second)
	var doneAtKill int64
	for doneAtKill < 50_000 {
		if time.Now().After(deadline) {
			t.Fatalf("snapshot progress stayed at %d rows", doneAtKill)
		}
		time.Sleep(200 * time.Millisecond)
		s := e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots WHERE name = $1`, "initial:"+e.slot)
		fmt.Sscan(s, &doneAtKill)
	}
	out, _ := e.cli("status", "--slot", e.slot)
	if !strings.Contains(out, "initial snapshot is in progress") || !strings.Contains(out, "running") {
		t.Errorf("status during the snapshot:\n%s", out)
	}
	code, body := get(t, "http://"+addr+"/readyz")
	if code != 200 || !strings.Contains(body, `"state":"snapshot"`) || !strings.Contains(body, `"snapshot_rows_total":200000`) {
		t.Errorf("/readyz during the snapshot: %d %s", code, body)
	}
	if _, metrics := get(t, "http://"+addr+"/metrics"); !strings.Contains(metrics, "cdc_router_snapshot_rows_expected 200000") ||
		!regexp.MustCompile(`cdc_router_events_published_total\{source="snapshot"\} [1-9]`).MatchString(metrics) ||
		!strings.Contains(metrics, `cdc_router_state{state="snapshot"} 1`) {
		t.Errorf("/metrics during the snapshot:\n%s", metrics)
	}
	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	r2 := e.start("")
	r2.waitLog("resuming the initial snapshot", 30*time.Second)
	r2.waitLog("msg=streaming ", 240*time.Second)
	w.write(500, 50, 0)
	got := c.waitFor(t, w.rows, 120*time.Second)
	dups, _ := duplicates(got)
	t.Logf("snapshot of 200,000 rows killed at %d rows confirmed: %d deliveries, %d duplicates", doneAtKill, len(got), dups)
	if int64(dups) >= doneAtKill {
		t.Errorf("%d duplicates: the snapshot started over instead of resuming after row %d", dups, doneAtKill)
	}
}

// TestBackfillWhileStreaming re-publishes one aggregate's rows, throttled and marked, while run streams;
// a finished backfill is not repeated by accident.
func TestBackfillWhileStreaming(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.startStreaming()
	w := newWriter(t, e.pgURL, 10)
	w.write(1000, 20, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	var target []row
	for _, x := range w.rows {
		if x.aggID == "agg-003" {
			target = append(target, x)
		}
	}
	wait := writeInBackground(w, 200)
	began := time.Now()
	out, code := e.cli("backfill", "--where", "aggregate_id = 'agg-003'", "--rate", "500", "--exchange", e.exchange, "--name", "agg3")
	took := time.Since(began)
	if code != 0 {
		t.Fatalf("backfill: exit %d\n%s", code, out)
	}
	wait()
	got := c.waitFor(t, w.rows, 30*time.Second)
	backfilled := map[string]int{}
	var last int64
	for _, d := range got {
		if d.msg.Headers["x-backfill"] == true {
			if d.aggID != "agg-003" {
				t.Fatalf("backfill published %s, which --where excludes", d.aggID)
			}
			backfilled[d.id]++
			if d.version <= last {
				t.Errorf("backfill out of order: v%d after v%d", d.version, last)
			}
			last = d.version
		}
	}
	t.Logf("backfill of %d rows at --rate 500 took %v; %d new events streamed meanwhile", len(target), took.Round(time.Millisecond), 200)
	for _, x := range target {
		if backfilled[x.id] != 1 {
			t.Errorf("row %s of agg-003 backfilled %d times, want once", x.id, backfilled[x.id])
			break
		}
	}
	if min := time.Duration(len(target)-1) * time.Second / 500; took < min {
		t.Errorf("backfill took %v, faster than --rate 500 allows (%v)", took, min)
	}
	out, code = e.cli("backfill", "--where", "aggregate_id = 'agg-003'", "--exchange", e.exchange, "--name", "agg3")
	if code == 0 || !strings.Contains(out, "--restart") {
		t.Errorf("a second run of a finished backfill: exit %d\n%s", code, out)
	}
}

func freeAddr(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func get(t testing.TB, url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestBackfillResumesAfterACrash kills a throttled backfill part-way: the next run of the same backfill
// resumes from its last confirmed key, and every matching row arrives.
func TestBackfillResumesAfterACrash(t *testing.T) {
	e := newStreamEnv(t)
	w := newWriter(t, e.pgURL, 20)
	w.prefill(6000, "")
	c := e.consume(e.queue)
	cmd := exec.Command(binary(t, ""), "backfill", "--where", "true", "--rate", "2000", "--exchange", e.exchange, "--name", "all")
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+e.pgURL, "CDC_ROUTER_AMQP_URL="+e.amqpURL)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	var done int64
	for done < 1000 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots WHERE name = 'backfill:all'`), &done)
	}
	cmd.Process.Kill()
	cmd.Wait()
	var stored int64
	fmt.Sscan(e.scalar(`SELECT rows_done::text FROM cdc_router.snapshots WHERE name = 'backfill:all'`), &stored)
	first := settled(c)
	out, code := e.cli("backfill", "--where", "true", "--exchange", e.exchange, "--name", "all")
	if code != 0 || !strings.Contains(out, "backfill resumed") {
		t.Fatalf("second run: exit %d\n%s", code, out)
	}
	got := c.waitFor(t, w.rows, 60*time.Second)
	second := settled(c) - first
	dups, _ := duplicates(got)
	t.Logf("backfill of %d rows killed with %d stored as confirmed: the rerun published %d rows; %d duplicates in all",
		len(w.rows), stored, second, dups)
	if want := len(w.rows) - int(stored); second != want {
		t.Errorf("the rerun published %d rows, want the %d after the stored key (not a restart from scratch)", second, want)
	}
}

// settled waits until no delivery has arrived for half a second and returns how many there are.
func settled(c *consumer) int {
	n := len(c.snapshot())
	for {
		time.Sleep(500 * time.Millisecond)
		m := len(c.snapshot())
		if m == n {
			return n
		}
		n = m
	}
}

// TestOneTransactionOf100000Events: a huge transaction streams through with bounded memory and is
// acknowledged only once all of it is confirmed.
func TestOneTransactionOf100000Events(t *testing.T) {
	e := newStreamEnv(t)
	c := e.count(e.queue, 0)
	r := e.start("")
	r.waitLog("msg=streaming ", 30*time.Second)
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'order', 'agg-' || (g % 100), g / 100 + 1, 'created', jsonb_build_object('n', g)
		FROM generate_series(0, 99999) g`)
	c.wait(t, 100_000, 3*time.Minute)
	end, _ := cdc.ParseLSN(e.scalar(`SELECT pg_current_wal_lsn()::text`))
	deadline := time.Now().Add(20 * time.Second)
	for e.ackedPosition() < end && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	rss := testenv.PeakRSS(r.Cmd.Process.Pid)
	t.Logf("one transaction of 100,000 events: all delivered, acknowledged %v, router peak RSS %.1f MiB", e.ackedPosition(), rss)
	if e.ackedPosition() < end {
		t.Errorf("acknowledged %v, never reached the end of the transaction (%v)", e.ackedPosition(), end)
	}
	if !testenv.RouterRace() && rss > 200 {
		t.Errorf("peak RSS %.1f MiB for one large transaction: memory is not bounded", rss)
	}
}

// TestSIGTERMDuringTheSnapshot stops the router gracefully in the middle of its initial snapshot: it exits
// 0 promptly, stores how far the confirms reached, and the next start finishes the snapshot.
func TestSIGTERMDuringTheSnapshot(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 100)
	w.prefill(60_000, "")
	r := e.start("")
	deadline := time.Now().Add(60 * time.Second)
	var done int64
	for done < 10_000 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots`), &done)
	}
	signalled := time.Now()
	r.signal(syscall.SIGTERM)
	if code := r.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM during the snapshot", code)
	}
	var stored int64
	fmt.Sscan(e.scalar(`SELECT rows_done::text FROM cdc_router.snapshots`), &stored)
	first := settled(c)
	r2 := e.start("")
	r2.waitLog("msg=streaming ", 120*time.Second)
	got := c.waitFor(t, w.rows, 60*time.Second)
	dups, _ := duplicates(got)
	t.Logf("SIGTERM during the snapshot: stopped in %v with %d of %d rows stored (%d delivered); %d duplicates after the restart",
		r.ExitAt.Sub(signalled).Round(time.Millisecond), stored, len(w.rows), first, dups)
	if int64(first)-stored > 2*2000 {
		t.Errorf("%d rows delivered but only %d stored as done: the stop did not store the confirmed progress", first, stored)
	}
}
