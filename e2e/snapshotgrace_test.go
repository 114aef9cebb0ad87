package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestLongSnapshotSurvivesAPostgreSQLCut: an initial snapshot that has run for longer than the start-up
// grace (30 s; held up here by a stalled broker connection, which the router also loses at its heartbeat
// timeout) loses its PostgreSQL connections. The router restarts and resumes the copy, as a streaming router
// would, instead of giving up as if its setup had never worked (nor refusing the table because the check of
// its columns met the cut); every row is then delivered, first deliveries in order per aggregate.
func TestLongSnapshotSurvivesAPostgreSQLCut(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 50)
	w.prefill(6000, "")
	pgp, pgURL := e.pgProxy()
	amqpp := testenv.NewProxy(t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
	began := time.Now()
	r := e.startVia(pgURL, "amqp://guest:guest@"+amqpp.Addr+"/", "--window", "64", "--lanes", "2")
	deadline := time.Now().Add(30 * time.Second)
	for len(c.snapshot()) < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries of the initial snapshot within 30 s:\n%s", len(c.snapshot()), tail(r.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	amqpp.Pause()
	time.Sleep(time.Until(began.Add(32 * time.Second))) // past the start-up grace, still copying
	if strings.Contains(r.Output(), `msg="snapshot finished"`) {
		t.Fatalf("the snapshot finished before the cut; nothing was tested")
	}
	pgp.Cut()
	amqpp.Resume()
	deadline = time.Now().Add(60 * time.Second)
	for !strings.Contains(r.Output(), "msg=streaming ") {
		if code, exited := r.Wait(100 * time.Millisecond); exited {
			t.Fatalf("the router exited %d after the cut instead of resuming the snapshot:\n%s", code, tail(r.Output(), 10))
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router did not stream within 60 s of the cut:\n%s", tail(r.Output(), 20))
		}
	}
	if !strings.Contains(r.Output(), "cause=postgres") || !strings.Contains(r.Output(), "resuming the initial snapshot") {
		t.Errorf("no restart with cause postgres and a resumed snapshot after the cut:\n%s", tail(r.Output(), 20))
	}
	expectEveryEventInOrder(t, c, w, "a PostgreSQL cut 32 s into the initial snapshot", 60*time.Second)
}

// TestSilentPostgreSQLDuringTheSnapshotIsBounded (chaos seed 417): PostgreSQL blackholed while the initial
// snapshot copies. The copy's waits on it (the next page, the progress store) end within --pg-timeout and a
// half: the router logs that the snapshot stopped waiting on PostgreSQL, naming the bound, /readyz turns
// 503, and once PostgreSQL answers again the copy resumes and every row arrives in order.
func TestSilentPostgreSQLDuringTheSnapshotIsBounded(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 50)
	w.prefill(20000, "")
	pgp, pgURL := e.pgProxy()
	amqpp := testenv.NewProxy(t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
	addr := freeAddr(t)
	r := e.startVia(pgURL, "amqp://guest:guest@"+amqpp.Addr+"/", "--window", "64", "--lanes", "2",
		"--pg-timeout", "4s", "--http-addr", addr)
	deadline := time.Now().Add(30 * time.Second)
	for len(c.snapshot()) < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries of the initial snapshot within 30 s:\n%s", len(c.snapshot()), tail(r.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	amqpp.Pause() // hold the copy on its confirms, so that it still has pages to read when PostgreSQL goes silent
	pgp.Pause()
	amqpp.Resume()
	silent := time.Now()
	const line = "the initial snapshot stopped waiting on PostgreSQL"
	saw503 := false
	for !strings.Contains(r.Output(), line) || !saw503 {
		if strings.Contains(r.Output(), `msg="snapshot finished"`) {
			t.Fatalf("the snapshot finished while PostgreSQL was silent; nothing was tested:\n%s", tail(r.Output(), 10))
		}
		if time.Since(silent) > 20*time.Second {
			t.Fatalf("20 s after PostgreSQL went silent during the snapshot: logged %q: %v, /readyz 503 seen: %v "+
				"(--pg-timeout 4s):\n%s", line, strings.Contains(r.Output(), line), saw503, tail(r.Output(), 20))
		}
		if code, _ := get(t, "http://"+addr+"/readyz"); code == 503 {
			saw503 = true
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("bounded %.1f s after PostgreSQL went silent", time.Since(silent).Seconds())
	pgp.Resume()
	expectEveryEventInOrder(t, c, w, "PostgreSQL silent during the initial snapshot", 90*time.Second)
}

// TestSilentPostgreSQLDuringABackfillIsBounded: a backfill whose PostgreSQL goes silent (TCP accepted,
// nothing answered) mid-copy stops within about --pg-timeout with an error that names the silence and
// says to run it again, and the same command run again resumes it: every row is delivered. It used to
// wait for ever.
func TestSilentPostgreSQLDuringABackfillIsBounded(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 50)
	w.prefill(3000, "")
	pgp, pgURL := e.pgProxy()
	args := []string{"backfill", "--pg-url", pgURL, "--where", "true", "--exchange", e.exchange, "--rate", "500",
		"--pg-timeout", "4s"}
	type result struct {
		out  string
		code int
		at   time.Time // when the command ended
	}
	done := make(chan result, 1)
	go func() {
		out, code := e.cli(args...)
		done <- result{out, code, time.Now()}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for len(c.snapshot()) < 500 {
		if time.Now().After(deadline) {
			t.Fatalf("%d deliveries of the backfill within 30 s", len(c.snapshot()))
		}
		time.Sleep(20 * time.Millisecond)
	}
	silent := time.Now()
	pgp.Pause()
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		pgp.Resume()
		t.Fatal("the backfill still waited 30 s after PostgreSQL went silent (--pg-timeout 4s)")
	}
	const line = "the backfill stopped waiting on PostgreSQL"
	if res.code != 1 || !strings.Contains(res.out, line) || !strings.Contains(res.out, "run the same backfill again") {
		t.Fatalf("backfill on a silent PostgreSQL: exit %d, want 1 and %q:\n%s", res.code, line, tail(res.out, 10))
	}
	if strings.Contains(res.out, "backfill") && strings.Contains(res.out, " done: ") {
		t.Fatalf("the backfill finished while PostgreSQL was silent; nothing was tested:\n%s", tail(res.out, 10))
	}
	t.Logf("bounded %.1f s after PostgreSQL went silent (--pg-timeout 4s), %d rows delivered before", res.at.Sub(silent).Seconds(), len(c.snapshot()))
	if res.at.Sub(silent) > 12*time.Second {
		t.Errorf("the backfill stopped %.1f s after PostgreSQL went silent, want about 1.5 × --pg-timeout 4s", res.at.Sub(silent).Seconds())
	}
	pgp.Resume()
	out, code := e.cli(args[:len(args)-4]...) // the same backfill (same --where and --exchange), without the rate
	if code != 0 || !strings.Contains(out, " done: ") {
		t.Fatalf("the backfill run again: exit %d:\n%s", code, tail(out, 10))
	}
	var ids []string
	for _, r := range w.rows {
		ids = append(ids, r.id)
	}
	firstDeliveries(t, c, ids, 30*time.Second)
}
