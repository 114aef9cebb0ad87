package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestPromotionDuringTheInitialSnapshotPG17: the router creates its failover slot (--failover-slot) and
// copies the table's rows; in the middle of the copy (its broker connection stalled through a proxy) the
// primary stops (immediate) and the standby is promoted. PostgreSQL 17 keeps a standby's copy of a failover
// slot only once the slot has advanced past the standby's own horizon, which it does by streaming, after the
// initial snapshot: the promoted standby has no slot. The router then refuses, naming the unfinished
// snapshot and reset, instead of creating a new slot and skipping what the old one held; after reset, run
// copies the table again on the promoted standby and streams. Every row is delivered at least once (those in
// the table before the slot, those written during the copy, those written after the promotion), first
// deliveries in order per aggregate, none that the database does not have.
func TestPromotionDuringTheInitialSnapshotPG17(t *testing.T) {
	e, pair := newPairEnv(t, 17)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 50)
	w.prefill(5000, "")
	p := testenv.NewProxy(t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
	r := e.start("amqp://guest:guest@"+p.Addr+"/", "--failover-slot", "--window", "64", "--lanes", "2")
	deadline := time.Now().Add(60 * time.Second)
	for len(c.snapshot()) < 1000 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries of the initial snapshot within 60 s:\n%s", len(c.snapshot()), tail(r.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.Pause()          // the copy stops in the middle of the table
	w.write(100, 5, 0) // after the slot's consistent point: the stream's (committed on the standby too)
	if strings.Contains(r.Output(), `msg="snapshot finished"`) {
		t.Fatalf("the initial snapshot finished before the promotion; nothing was tested:\n%s", tail(r.Output(), 20))
	}
	atCrash := len(c.snapshot())
	crashed := time.Now()
	pair.Primary.Stop("immediate")
	if err := pair.Promote(); err != nil {
		t.Fatal(err)
	}
	p.Resume()
	if code := r.wait(90 * time.Second); code != 1 {
		t.Fatalf("exit %d after a promotion during the initial snapshot, want 1 (the refusal):\n%s", code, tail(r.Output(), 30))
	}
	out := r.Output()
	for _, want := range []string{"does not exist but a position", "initial snapshot was unfinished", "cdc-router reset --slot " + e.slot} {
		if !strings.Contains(out, want) {
			t.Errorf("the router's refusal has no %q:\n%s", want, tail(out, 20))
		}
	}
	t.Logf("the router refused %v after the primary stopped: %s", r.ExitAt.Sub(crashed).Round(time.Millisecond),
		tail(strings.TrimSpace(out), 1))
	if text, code := e.cli("reset", "--slot", e.slot); code != 0 {
		t.Fatalf("reset on the promoted standby exited %d:\n%s", code, text)
	}
	e.startStreaming()
	ctx := context.Background()
	w.db.Close(ctx)
	var err error
	if w.db, err = pgx.Connect(ctx, e.pgURL); err != nil { // the multi-host URL finds the promoted standby
		t.Fatal(err)
	}
	w.write(100, 5, 0)
	got := c.waitFor(t, w.rows, 120*time.Second)
	dups, _ := duplicates(got)
	t.Logf("promotion during the initial snapshot: %d rows (5,000 before the slot, 100 during the copy, 100 after "+
		"the promotion), %d delivered at the crash, %d deliveries, %d duplicates", len(w.rows), atCrash, len(got), dups)
	checkOrder(t, got)
	if extra := unexpected(got, w.rows); len(extra) > 0 {
		t.Errorf("%d deliveries of rows the promoted primary does not have, e.g. %s", len(extra), extra[0])
	}
}
