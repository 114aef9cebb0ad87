package e2e

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// pauseLease is the --lease of the routers of TestPausedRouter (paused past the lease): PostgreSQL ends the
// session holding the slot's lock this long after the paused router's last word.
const pauseLease = 4 * time.Second

// timedConsumer records every delivery on a queue with the moment it arrived.
type timedConsumer struct {
	mu  sync.Mutex
	got []timedDelivery
}

type timedDelivery struct {
	delivery
	at time.Time
}

func (e *env) consumeTimed(queue string) *timedConsumer {
	e.t.Helper()
	msgs, err := e.channel().Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		e.t.Fatalf("consume %s: %v", queue, err)
	}
	c := &timedConsumer{}
	go func() {
		for m := range msgs {
			v, _ := m.Headers["aggregate_version"].(int64)
			at, _ := m.Headers["aggregate_type"].(string)
			ai, _ := m.Headers["aggregate_id"].(string)
			c.mu.Lock()
			c.got = append(c.got, timedDelivery{delivery{m.MessageId, at, ai, m.RoutingKey, v, amqp.Delivery{}}, time.Now()})
			c.mu.Unlock()
		}
	}()
	return c
}

func (c *timedConsumer) snapshot() []timedDelivery {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]timedDelivery(nil), c.got...)
}

// count is how many deliveries of aggregate id arrived.
func (c *timedConsumer) count(id string) int {
	n := 0
	for _, d := range c.snapshot() {
		if d.aggID == id {
			n++
		}
	}
	return n
}

// waitState polls r's /healthz until it reports state, for at most timeout, and returns when it did.
func waitState(t testing.TB, r standbyRouter, state string, timeout time.Duration) (time.Time, bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if _, h := r.health("/healthz"); h.State == state {
			return time.Now(), true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return time.Time{}, false
}

// TestPausedRouter (issue 36, findings 1 and 2): a router that stops answering while a standby runs, in the
// middle of a hot aggregate's transaction (100 versions, published one at a time: the paused router holds
// the rest, and the broker's confirms of what it wrote pile up in its socket).
//
//   - paused past the lease: with --lease 4s, PostgreSQL ends the paused router's walsender, and with it the
//     slot's lock, 4 s after its last word, so the standby streams within the lease and its next attempt
//     (before: the lock lived on the router's ordinary session, which the kernel kept alive, and nobody
//     streamed for as long as the pause lasted);
//   - its sessions ended a second into the pause (what a dead host's TCP keepalives do; --lease 30s, so that
//     the lease cannot be what stops it): the standby takes over within seconds.
//
// Either way, once resumed, the paused router writes nothing more to RabbitMQ (before: it wrote the versions
// it held, arriving after the standby had delivered later versions of the aggregate), and stands by. What the
// consumer sees after the resume never goes back in an aggregate's versions, and every event arrives.
func TestPausedRouter(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lease time.Duration
		kill  bool // end the paused router's PostgreSQL sessions
		bound time.Duration
	}{
		{"paused past the lease", pauseLease, false, pauseLease + 3*time.Second},
		{"session ended while paused", 30 * time.Second, true, 5 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) { pausedRouter(t, tc.lease, tc.kill, tc.bound) })
	}
}

func pausedRouter(t *testing.T, lease time.Duration, kill bool, bound time.Duration) {
	e := newStreamEnv(t)
	c := e.consumeTimed(e.queue)
	start := func() standbyRouter {
		addr := freeAddr(t)
		return standbyRouter{e.start("", "--http-addr", addr, "--lease", lease.String()), addr}
	}
	first := start()
	first.waitLog("msg=streaming ", 30*time.Second)
	var pids []int32 // the first router's PostgreSQL sessions
	rows, err := e.db.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = 'cdc-router'`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var pid int32
		rows.Scan(&pid)
		pids = append(pids, pid)
	}
	if rows.Close(); len(pids) < 2 {
		t.Fatalf("the streaming router has %d sessions, want its ordinary and its replication connection", len(pids))
	}
	second := start()
	if _, ok := waitState(t, second, "standby", 15*time.Second); !ok {
		t.Fatalf("the second router does not stand by:\n%s", tail(second.Output(), 20))
	}
	w := newWriter(t, e.pgURL, 20)
	stop := writeSlowly(t, w)
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		SELECT gen_random_uuid(), 'order', 'hot', g, 'created', '{}'::jsonb, '{}'::jsonb FROM generate_series(1, 100) g`)
	deadline := time.Now().Add(20 * time.Second)
	for c.count("hot") < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the hot aggregate's events arrived within 20 s", c.count("hot"))
		}
		time.Sleep(5 * time.Millisecond)
	}

	paused := time.Now()
	first.signal(syscall.SIGSTOP)
	t.Cleanup(func() { first.signal(syscall.SIGCONT) })
	if kill {
		// The walsender goes on sending WAL into the paused router's socket for a second: once resumed, the
		// router reads events the standby will have published by then.
		time.Sleep(time.Second)
		e.exec(`SELECT pg_terminate_backend(pid) FROM unnest($1::int[]) pid`, pids)
	}
	took, ok := waitState(t, second, "streaming", bound+20*time.Second)
	if !ok {
		t.Fatalf("the standby did not stream within %v of the pause:\n%s", bound+20*time.Second, tail(second.Output(), 20))
	}
	takeover := took.Sub(paused)
	t.Logf("standby streaming %v after the active router was paused (lease %v, sessions ended: %v)",
		takeover.Round(time.Millisecond), lease, kill)
	if takeover > bound {
		t.Errorf("the standby took over %v after the pause, want within %v", takeover.Round(time.Millisecond), bound)
	}
	time.Sleep(time.Second) // the standby delivers later versions of the hot aggregate
	resumed := time.Now()
	first.signal(syscall.SIGCONT)
	standing, ok := waitState(t, first, "standby", 15*time.Second)
	if !ok {
		_, h := first.health("/healthz")
		t.Errorf("the resumed router is %q 15 s after the resume, want standby", h.State)
	}
	time.Sleep(time.Second)
	stop()

	var ids []string
	if err := e.db.QueryRow(context.Background(), `SELECT array_agg(id::text) FROM outbox`).Scan(&ids); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(60 * time.Second)
	var arrived time.Time
	for {
		got := c.snapshot()
		seen := map[string]bool{}
		for _, d := range got {
			seen[d.id] = true
		}
		missing := 0
		for _, id := range ids {
			if !seen[id] {
				missing++
			}
		}
		if missing == 0 {
			arrived = time.Now()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events never arrived", missing, len(ids))
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Once the standby streams, only it publishes: it starts again from the acknowledged position (and the
	// progress stored inside the hot transaction), so its first deliveries may repeat what the paused router
	// delivered, but from then on no delivery goes back in its aggregate's versions; the resumed router's
	// would, when the standby has delivered later versions of the aggregate than the ones it held.
	got := c.snapshot()
	highest := map[string]int64{} // of the deliveries since the standby took over
	stale, after := 0, 0
	for _, d := range got {
		if d.at.Before(took) {
			continue
		}
		key := d.aggType + "/" + d.aggID
		if !d.at.Before(resumed) {
			after++
		}
		if d.version < highest[key] {
			if stale < 5 {
				t.Errorf("aggregate %s: version %d arrived after version %d, %v after the resume (the standby streamed %v "+
					"before it): a router published an older version after the standby took over", key, d.version, highest[key],
					d.at.Sub(resumed).Round(time.Millisecond), resumed.Sub(took).Round(time.Millisecond))
			}
			stale++
		}
		highest[key] = max(highest[key], d.version)
	}
	if stale > 0 {
		t.Errorf("%d deliveries since the standby took over went back in their aggregate's versions", stale)
	}
	dups, _ := duplicates(deliveries(got))
	t.Logf("%d events, %d deliveries (%d duplicates), %d after the resume; the resumed router stood by %v after the resume "+
		"(its fence refused a write: %v); every event arrived %v after the resume", len(ids), len(got), dups, after,
		standing.Sub(resumed).Round(time.Millisecond), first.WaitOutput("stopped writing to RabbitMQ", 0),
		arrived.Sub(resumed).Round(time.Millisecond))
}

// deliveries drops the arrival times.
func deliveries(got []timedDelivery) []delivery {
	out := make([]delivery, len(got))
	for i, d := range got {
		out[i] = d.delivery
	}
	return out
}

// writeSlowly writes a few rows every 10 ms (about 300 a second, over the writer's aggregates) until stop is
// called, or the test ends.
func writeSlowly(t testing.TB, w *writer) (stop func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				w.write(5, 5, 10*time.Millisecond)
			}
		}
	}()
	var once sync.Once
	stop = func() { once.Do(func() { close(quit); <-done }) }
	t.Cleanup(stop)
	return stop
}
