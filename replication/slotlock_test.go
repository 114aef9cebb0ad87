package replication

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/migrations"
)

// pg is the throwaway PostgreSQL cluster of this test binary; each test that needs one gets its own database.
var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// unconfirming is a Publisher that takes every event and confirms none, like a broker that stopped
// confirming: a snapshot copy then waits for confirms and asks PostgreSQL nothing. It records when it
// was handed its first and last event and when it was closed.
type unconfirming struct {
	mu                  sync.Mutex
	n                   int
	first, last, closed time.Time
}

func (p *unconfirming) Publish(context.Context, cdc.Event, func()) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n++; p.first.IsZero() {
		p.first = time.Now()
	}
	p.last = time.Now()
	return nil
}
func (p *unconfirming) Failed() <-chan struct{}     { return nil }
func (p *unconfirming) Err() error                  { return nil }
func (p *unconfirming) Drain(context.Context) error { return nil }
func (p *unconfirming) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed.IsZero() {
		p.closed = time.Now()
	}
	return nil
}

// seen returns how many events p took, when it took the first and the last, and when it was closed.
func (p *unconfirming) seen() (n int, first, last, closed time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.first, p.last, p.closed
}

// active reports whether stats says what makes /readyz?active=1 answer 200: streaming or copying.
func active(stats *metrics.Stats) bool {
	state, _, _ := stats.State()
	return state == metrics.StateSnapshot || state == metrics.StateStreaming
}

// TestCopyThatLostTheSlotLockStopsBeforeTheStandbyCopies (seed 8110 of the harness): router a copies the
// initial snapshot through a proxy, to a publisher that confirms nothing, so the copy waits and asks
// PostgreSQL nothing; router b stands by. Then a loses the slot's lock, by a cut of all its connections
// (the harness's fault) or by a termination of the lock's session alone, and must leave state snapshot
// within the lease's check interval and a round trip; or PostgreSQL stops answering a (the proxy pauses),
// and a must leave it within the lease. a closes its publisher and hands it nothing more; b copies only
// after that, and at no moment are both active. Before the lease, a copied on (state snapshot,
// /readyz?active=1 200) until its next progress write, beside b (cut and terminated fail without it).
func TestCopyThatLostTheSlotLockStopsBeforeTheStandbyCopies(t *testing.T) {
	for _, c := range []struct {
		hit    string
		within time.Duration
	}{{"cut", lockCheckEvery}, {"terminated", lockCheckEvery}, {"silent", lockLease}} {
		t.Run(c.hit, func(t *testing.T) { lockLostDuringCopy(t, c.hit, c.within) })
	}
}

func lockLostDuringCopy(t *testing.T, hit string, within time.Duration) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if err := migrations.Apply(ctx, admin, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'order', 'a' || a, 1, 'created', '{}' FROM generate_series(1, 100) a`); err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
	cfg := Config{PGURL: url, Slot: testenv.Name(t), SnapshotPageSize: 10, PGTimeout: 5 * time.Second,
		ShutdownTimeout: 2 * time.Second}
	cfgA := cfg
	cfgA.PGURL = strings.Replace(url, fmt.Sprintf("127.0.0.1:%d", pg.Port), proxy.Addr, 1)
	quiet := slog.New(slog.DiscardHandler)
	start := func(cfg Config, pub *unconfirming, stats *metrics.Stats) (stop func()) {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- Run(rctx, cfg, func(context.Context) (Publisher, error) { return pub, nil }, quiet, stats)
		}()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("run: %v", err)
			}
		}
	}
	await := func(what string, cond func() bool) {
		t.Helper()
		for began := time.Now(); !cond(); time.Sleep(5 * time.Millisecond) {
			if time.Since(began) > 20*time.Second {
				t.Fatalf("no %s after 20 s", what)
			}
		}
	}
	pubA, pubB := &unconfirming{}, &unconfirming{}
	statsA, statsB := &metrics.Stats{}, &metrics.Stats{}
	stopA := start(cfgA, pubA, statsA)
	defer stopA()
	await("copy by router a", func() bool { n, _, _, _ := pubA.seen(); return active(statsA) && n > 0 })
	stopB := start(cfg, pubB, statsB)
	defer stopB()
	await("standby b", func() bool { s, _, _ := statsB.State(); return s == metrics.StateStandby })

	hitAt := time.Now()
	switch hit {
	case "cut":
		proxy.Cut()
	case "silent":
		proxy.Pause()
	case "terminated":
		_, err := admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`)
		if err != nil {
			t.Fatal(err)
		}
	}
	// A silent PostgreSQL keeps a's session, and with it the lock, until the partition ends: b stands by
	// meanwhile, and the run ends a second after a left state snapshot. Otherwise it ends at b's first row.
	var aLeft time.Time
	over := func() bool {
		if hit == "silent" {
			return !aLeft.IsZero() && time.Since(aLeft) > time.Second
		}
		n, _, _, _ := pubB.seen()
		return n > 0
	}
	for began := time.Now(); !over(); time.Sleep(2 * time.Millisecond) {
		a, b := active(statsA), active(statsB)
		if a && b {
			t.Fatalf("split brain: both routers in state snapshot %v after the lock was %s", time.Since(hitAt).Round(time.Millisecond), hit)
		}
		if !a && aLeft.IsZero() {
			aLeft = time.Now()
			proxy.Pause() // a starts again and would often take the lock back before b's next try, a second apart
		}
		if time.Since(began) > 20*time.Second {
			t.Fatalf("not over within 20 s after the lock was %s; a active: %v, b: %v", hit, a, b)
		}
	}
	proxy.Resume()
	n, bFirst, _, _ := pubB.seen()
	_, _, aLast, aClosed := pubA.seen()
	if hit == "silent" {
		if n > 0 {
			t.Errorf("b copied while a's session, silent, still held the lock")
		}
		bFirst = time.Now() // none
	}
	if took := aLeft.Sub(hitAt); took > within+500*time.Millisecond {
		t.Errorf("a left state snapshot %v after the lock was %s, want within %v and a round trip", took, hit, within)
	}
	if aClosed.IsZero() || !aClosed.Before(bFirst) || !aLast.Before(aLeft) {
		t.Errorf("a's publisher: last event +%v, closed +%v; b's first event +%v; a left state snapshot +%v: want a's last "+
			"event before that and a's publisher closed before b's first", aLast.Sub(hitAt), aClosed.Sub(hitAt),
			bFirst.Sub(hitAt), aLeft.Sub(hitAt))
	}
	t.Logf("lock %s: a left state snapshot after %v and closed its publisher after %v; b's first row after %v (%d rows)",
		hit, aLeft.Sub(hitAt).Round(time.Millisecond), aClosed.Sub(hitAt).Round(time.Millisecond), bFirst.Sub(hitAt).Round(time.Millisecond), n)
}
