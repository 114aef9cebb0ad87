package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// newPairEnv is newStreamEnv on a primary with a physical standby that synchronizes failover slots (see
// testenv.StartPair), of PostgreSQL major. The primary commits synchronously (synchronous_standby_names
// names the standby), so a commit the writer saw is on the standby too. e.pgURL lists both servers with
// target_session_attrs=primary.
func newPairEnv(t *testing.T, major int) (*env, *testenv.Pair) {
	t.Helper()
	bin, err := testenv.PostgresBin(major)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := testenv.StartPair(bin, "synchronous_standby_names="+testenv.StandbySlot)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("PostgreSQL logs:\n%s", pair.Log(30))
		}
		pair.Close()
	})
	direct := pair.Primary.NewDatabase(t)
	name := direct[strings.LastIndex(direct, "/")+1 : strings.Index(direct, "?")]
	e := newEnvAt(t, pair.URL(name))
	e.declare(true, "#")
	return e, pair
}

// failoverWriter commits outbox transactions through a failover: a commit that fails (the primary went
// away) is in doubt, so after reconnecting (the multi-host URL finds the new primary) the writer takes
// the rows and aggregate versions from the database itself. Rows counts only commits the database has.
type failoverWriter struct {
	mu sync.Mutex
	w  *writer
}

// run writes until stop is closed; it returns the number of failed commits.
func (f *failoverWriter) run(url string, stop <-chan struct{}) (failed int) {
	for {
		select {
		case <-stop:
			return failed
		default:
		}
		f.mu.Lock()
		err := f.w.txn(1+f.w.rng.IntN(10), true)
		f.mu.Unlock()
		if err == nil {
			time.Sleep(3 * time.Millisecond)
			continue
		}
		failed++
		if err := f.reconnect(url, stop); err != nil {
			f.w.t.Errorf("writer: %v", err)
			return failed
		}
	}
}

// reconnect connects again (within 90 s) and resynchronizes rows and versions with the database.
func (f *failoverWriter) reconnect(url string, stop <-chan struct{}) error {
	ctx := context.Background()
	deadline := time.Now().Add(90 * time.Second)
	for {
		c, err := pgx.Connect(ctx, url)
		if err == nil {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.w.db.Close(ctx)
			f.w.db = c
			return f.resync(ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no primary within 90 s: %w", err)
		}
		select {
		case <-stop:
			return nil
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// resync makes rows exactly the outbox rows the database has, and versions their maximum per aggregate.
func (f *failoverWriter) resync(ctx context.Context) error {
	rows, err := f.w.db.Query(ctx, `SELECT id::text, aggregate_type, aggregate_id, aggregate_version FROM outbox`)
	if err != nil {
		return err
	}
	have, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.id, &x.aggType, &x.aggID, &x.version)
	})
	if err != nil {
		return err
	}
	known := map[string]bool{}
	for _, r := range have {
		known[r.id] = true
	}
	var kept []row
	for _, r := range f.w.rows {
		if known[r.id] {
			kept = append(kept, r)
			delete(known, r.id)
		} else {
			f.w.t.Errorf("row %s was committed (its commit returned) but the promoted standby does not have it", r.id)
		}
	}
	for _, r := range have {
		if known[r.id] { // committed, but the commit's answer was lost with the old primary
			kept = append(kept, r)
		}
		f.w.versions[r.aggID] = max(f.w.versions[r.aggID], r.version)
	}
	f.w.rows = kept
	return nil
}

// committed returns a copy of the rows committed so far.
func (f *failoverWriter) committed() []row {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]row(nil), f.w.rows...)
}

// lsnOf reads one pg_lsn column (as text) from the server at url; 0 when there is no row or it is null.
func lsnOf(t testing.TB, url, sql string, args ...any) cdc.LSN {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer c.Close(context.Background())
	var s *string
	if err := c.QueryRow(ctx, sql, args...).Scan(&s); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return 0
	}
	l, err := cdc.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// waitSynced waits until the standby's synchronized copy of the slot (synced, not temporary) has a
// confirmed_flush_lsn at or past at, and returns it (10 to 15 s after the router created the slot, here).
func waitSynced(t testing.TB, pair *testenv.Pair, db, slot string, at cdc.LSN) cdc.LSN {
	t.Helper()
	url := pair.Standby.URL(db)
	began := time.Now()
	deadline := began.Add(90 * time.Second)
	for {
		got := lsnOf(t, url, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots
			WHERE slot_name = $1 AND synced AND NOT temporary`, slot)
		if got >= at && got != 0 {
			t.Logf("the standby's copy of slot %s passed %s after %v", slot, at, time.Since(began).Round(time.Millisecond))
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby's synced copy of slot %s is at %s after 90 s, want %s or later", slot, got, at)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestFailoverSlotContinuesOnPromotedStandbyPG17(t *testing.T) { testFailoverSlot(t, 17, 0) }

// The PostgreSQL 18 run promotes the standby 10 s after the primary stopped, as a failover manager that
// waits for its leader lock to expire does: the router, retrying every second while it finds only a
// standby (a grown backoff would wait 3.2 s or more by then), streams soon after the promotion.
func TestFailoverSlotContinuesOnPromotedStandbyPG18(t *testing.T) {
	testFailoverSlot(t, 18, 10*time.Second)
}

// testFailoverSlot runs the router with --failover-slot on a multi-host URL while writers commit; once the
// standby's synchronized copy of the slot has passed a point the router acknowledged, the primary is
// stopped (immediate) and the standby promoted mid-stream, and the writers go on on the new primary. Every
// committed row arrives, first deliveries per aggregate in order, none that the database does not have;
// only rows committed after the synced point may come twice; the stored position records the new timeline.
// The standby is promoted delay after the primary stopped.
func testFailoverSlot(t *testing.T, major int, delay time.Duration) {
	e, pair := newPairEnv(t, major)
	c := e.consume(e.queue)
	r := e.start("", "--failover-slot")
	r.waitLog("msg=streaming ", 30*time.Second)
	fw := &failoverWriter{w: newWriter(t, e.pgURL, 50)}
	stop := make(chan struct{})
	var failed int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); failed = fw.run(e.pgURL, stop) }()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		wg.Wait()
	}()
	for began := time.Now(); len(fw.committed()) < 1000; {
		if time.Since(began) > 60*time.Second {
			t.Fatalf("the writers committed %d rows in 60 s, want 1000", len(fw.committed()))
		}
		time.Sleep(50 * time.Millisecond)
	}
	before := len(fw.committed()) // these rows commit before mark
	mark := lsnOf(t, pair.Primary.URL(e.slot), "SELECT pg_current_wal_lsn()::text")
	synced := waitSynced(t, pair, e.slot, e.slot, mark)
	time.Sleep(500 * time.Millisecond) // mid-stream: writers and the router are busy
	atCrash := len(fw.committed())
	stopped := time.Now()
	pair.Primary.Stop("immediate")
	time.Sleep(delay)
	if err := pair.Promote(); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	r.waitLog("timeline=2", 90*time.Second)
	resumed := time.Now()
	if gap := longestRetryGap(r.Output(), "no primary PostgreSQL at"); delay > 0 && gap > 3*time.Second {
		t.Errorf("while only the standby answered, the router waited up to %v between attempts, want about a second",
			gap.Round(time.Millisecond))
	}
	for len(fw.committed()) < atCrash+1000 {
		if time.Since(promoted) > 90*time.Second {
			t.Fatalf("the writers committed %d rows on the new primary within 90 s, want 1000", len(fw.committed())-atCrash)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	defer fw.w.db.Close(context.Background())
	rows := fw.committed()
	got := c.waitFor(t, rows, 120*time.Second)
	dups, dupIDs := duplicates(got)
	t.Logf("PostgreSQL %d failover: %d rows (%d before the synced mark, %d at the stop), %d failed commits, "+
		"%d deliveries, %d duplicates; synced copy at %s, mark %s; stop to promoted %v, to streaming on the new "+
		"primary %v (%v after the promotion; longest wait between attempts meanwhile %v)", major, len(rows), before,
		atCrash, failed, len(got), dups, synced, mark, promoted.Sub(stopped).Round(time.Millisecond),
		resumed.Sub(stopped).Round(time.Millisecond), resumed.Sub(promoted).Round(time.Millisecond),
		longestRetryGap(r.Output(), "no primary PostgreSQL at").Round(time.Millisecond))
	checkOrder(t, got)
	if extra := unexpected(got, rows); len(extra) > 0 {
		t.Errorf("%d deliveries of rows the promoted primary does not have (the router published changes the standby "+
			"did not have: synchronized_standby_slots not honoured?), e.g. %s", len(extra), extra[0])
	}
	early := map[string]bool{}
	for _, r := range rows[:before] {
		early[r.id] = true
	}
	for _, id := range dupIDs {
		if early[id] {
			t.Errorf("row %s was committed before the standby's copy of the slot passed it, yet delivered twice", id)
			break
		}
	}
	out := r.Output()
	for _, want := range []string{"synchronized from a former primary", "another timeline than when the position was stored"} {
		if !strings.Contains(out, want) {
			t.Errorf("the router's log has no %q after the promotion:\n%s", want, tail(out, 30))
		}
	}
	if strings.Contains(out, "does not exist but a position") {
		t.Errorf("the router refused on the promoted standby:\n%s", tail(out, 30))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var timeline int32
		e.db.Close(context.Background())
		var err error
		if e.db, err = pgx.Connect(context.Background(), e.pgURL); err != nil {
			t.Fatal(err)
		}
		err = e.db.QueryRow(context.Background(), "SELECT timeline FROM cdc_router.positions WHERE slot = $1", e.slot).Scan(&timeline)
		if err == nil && timeline == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stored position's timeline is %d (%v) after the promotion, want 2", timeline, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	status, code := e.cli("status", "--slot", e.slot)
	for _, want := range []string{"timeline 2", "failover:         yes", "synchronized from a former primary"} {
		if code != 0 || !strings.Contains(status, want) {
			t.Errorf("cdc-router status over the multi-host URL (exit %d) has no %q:\n%s", code, want, status)
		}
	}
}

// TestPromotionWithoutFailoverSlotIsRefused: a slot created without --failover-slot is not on the standby,
// so after a promotion the router refuses with the slot-lost sentence (naming reset, and --failover-slot for
// the next time) instead of creating a new slot and skipping events.
func TestPromotionWithoutFailoverSlotIsRefused(t *testing.T) {
	e, pair := newPairEnv(t, 17)
	c := e.consume(e.queue)
	r := e.start("")
	r.waitLog("msg=streaming ", 30*time.Second)
	w := newWriter(t, e.pgURL, 10)
	w.write(200, 10, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	pair.Primary.Stop("immediate")
	if err := pair.Promote(); err != nil {
		t.Fatal(err)
	}
	if code := r.wait(90 * time.Second); code != 1 {
		t.Fatalf("exit code %d after the promotion, want 1:\n%s", code, tail(r.Output(), 30))
	}
	want := fmt.Sprintf("replication slot %s does not exist but a position", e.slot)
	out := r.Output()
	for _, w := range []string{want, "cdc-router reset --slot " + e.slot, "run the router with --failover-slot"} {
		if !strings.Contains(out, w) {
			t.Errorf("the router's last words have no %q:\n%s", w, tail(out, 20))
		}
	}
}

// TestFailoverSlotEnabledOnExistingSlot: a slot the router created without --failover-slot gets FAILOVER
// when the router starts again with it, and the standby then keeps a synchronized copy.
func TestFailoverSlotEnabledOnExistingSlot(t *testing.T) {
	e, pair := newPairEnv(t, 17)
	r := e.startStreaming()
	if got := e.scalar("SELECT failover::text FROM pg_replication_slots WHERE slot_name = $1", e.slot); got != "false" {
		t.Fatalf("failover = %s for a slot created without --failover-slot, want false", got)
	}
	r.signal(syscall.SIGTERM)
	if code := r.wait(30 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	r = e.startStreaming("--failover-slot")
	if !strings.Contains(r.Output(), "enabled failover on the existing replication slot") {
		t.Errorf("no log line about enabling failover:\n%s", tail(r.Output(), 20))
	}
	if got := e.scalar("SELECT failover::text FROM pg_replication_slots WHERE slot_name = $1", e.slot); got != "true" {
		t.Errorf("failover = %s after starting with --failover-slot, want true", got)
	}
	w := newWriter(t, e.pgURL, 10)
	w.write(50, 10, 0)
	waitSynced(t, pair, e.slot, e.slot, lsnOf(t, pair.Primary.URL(e.slot), "SELECT pg_current_wal_lsn()::text"))
}

// TestFailoverSlotRefusedBeforePostgres17: on PostgreSQL 16 --failover-slot is refused with one sentence
// before any slot is created.
func TestFailoverSlotRefusedBeforePostgres17(t *testing.T) {
	e := newEnvOn(t, postgresOf(t, 16))
	r := e.start("", "--failover-slot")
	if code := r.wait(60 * time.Second); code != 1 {
		t.Fatalf("exit code %d with --failover-slot on PostgreSQL 16, want 1:\n%s", code, tail(r.Output(), 20))
	}
	if out := r.Output(); !strings.Contains(out, "--failover-slot (CDC_ROUTER_FAILOVER_SLOT) needs PostgreSQL 17 or later") {
		t.Errorf("no refusal naming PostgreSQL 17:\n%s", tail(out, 20))
	}
	if n := e.scalar("SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1", e.slot); n != "0" {
		t.Errorf("%s slots created on PostgreSQL 16 with --failover-slot, want 0", n)
	}
}

// TestFailoverSlotWarnsOfAMissingStandbySlot: synchronized_standby_slots naming a slot this server does
// not have (a promoted standby that kept its old primary's setting) holds every change of a failover slot
// back. The router says so at start, naming the fix; once it is applied the events flow.
func TestFailoverSlotWarnsOfAMissingStandbySlot(t *testing.T) {
	e := newEnvOn(t, postgresOf(t, 17))
	e.declare(true, "#")
	e.exec("ALTER SYSTEM SET synchronized_standby_slots = 'gone'")
	e.exec("SELECT pg_reload_conf()")
	c := e.consume(e.queue)
	r := e.startStreaming("--failover-slot")
	if !strings.Contains(r.Output(), "synchronized_standby_slots names gone, which is missing on this server") {
		t.Errorf("no warning about the missing standby slot:\n%s", tail(r.Output(), 20))
	}
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	time.Sleep(3 * time.Second)
	if n := len(c.snapshot()); n != 0 {
		t.Fatalf("%d events arrived while synchronized_standby_slots names a missing slot; PostgreSQL should hold them back", n)
	}
	e.exec("ALTER SYSTEM SET synchronized_standby_slots = ''")
	e.exec("SELECT pg_reload_conf()")
	expectEveryEventInOrder(t, c, w, "after clearing synchronized_standby_slots", 60*time.Second)
}

// longestRetryGap is the longest time between two consecutive log lines of the router that contain s.
func longestRetryGap(out, s string) time.Duration {
	var last time.Time
	var gap time.Duration
	for _, line := range strings.Split(out, "\n") {
		if !strings.Contains(line, s) || !strings.HasPrefix(line, "time=") {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, strings.Fields(line)[0][len("time="):])
		if err != nil {
			continue
		}
		if !last.IsZero() {
			gap = max(gap, at.Sub(last))
		}
		last = at
	}
	return gap
}
