package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// limitQueue applies a policy to this test's queue only (its name is unique to the test) that refuses,
// with a nack, a message that does not fit in max bytes; the returned func clears it (also at cleanup).
func (e *env) limitQueue(max int) (clear func()) {
	e.t.Helper()
	name := "cdc-router-order-" + e.queue
	rabbitmqctl(e.t, "set_policy", name, "^"+regexp.QuoteMeta(e.queue)+"$",
		fmt.Sprintf(`{"max-length-bytes":%d,"overflow":"reject-publish"}`, max), "--apply-to", "queues", "--priority", "100")
	cleared := false
	clear = func() {
		if !cleared {
			cleared = true
			rabbitmqctl(e.t, "clear_policy", name)
		}
	}
	e.t.Cleanup(clear)
	deadline := time.Now().Add(10 * time.Second)
	for {
		out, _ := testenv.Rabbitmqctl(e.t, "list_queues", "-q", "--no-table-headers", "name", "policy").CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == e.queue && f[1] == name {
				return clear
			}
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("policy %s not applied to %s within 10 s:\n%s", name, e.queue, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// insertVersions inserts v1 (event type type1, a payload of pad bytes) and v2 (event type type2, small)
// of aggregate order/o-1, and v1 of order/o-2 (type2, small), in one transaction, and returns the three
// rows in that order.
func (e *env) insertVersions(type1 string, pad int, type2 string) []row {
	e.t.Helper()
	rows := []row{{uuid(), "order", "o-1", 1}, {uuid(), "order", "o-1", 2}, {uuid(), "order", "o-2", 1}}
	ctx := context.Background()
	tx, err := e.db.Begin(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	for i, ty := range []string{type1, type2, type2} {
		n := 0
		if i == 0 {
			n = pad
		}
		_, err := tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			VALUES ($1, $2, $3, $4, $5, jsonb_build_object('pad', repeat('x', $6)))`,
			rows[i].id, rows[i].aggType, rows[i].aggID, rows[i].version, ty, n)
		if err != nil {
			e.t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		e.t.Fatal(err)
	}
	return rows
}

// waitRefusals waits until the router has restarted its stream twice after a refusal whose error
// contains reason.
func waitRefusals(t testing.TB, r *router, reason string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		n := 0
		for _, line := range strings.Split(r.Output(), "\n") {
			if strings.Contains(line, "stream stopped; restarting") && strings.Contains(line, reason) {
				n++
			}
		}
		if n >= 2 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the router restarted %d times after %q within 30 s, want 2:\n%s", n, reason, tail(r.Output(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// expectHeldThenOrdered checks, while the broker still refuses v1 (rows[0]), that v2 (rows[1]) was never
// delivered; then, after unblock lets v1 through, that v1 is first delivered before v2.
func expectHeldThenOrdered(t *testing.T, c *consumer, rows []row, unblock func()) {
	t.Helper()
	for _, d := range c.snapshot() {
		if d.id == rows[0].id || d.id == rows[1].id {
			t.Fatalf("version %d of %s delivered while the broker refuses version 1", d.version, d.aggID)
		}
	}
	unblock()
	got := c.waitFor(t, rows, 60*time.Second)
	first := map[string]int{}
	for i, d := range got {
		if _, ok := first[d.id]; !ok {
			first[d.id] = i
		}
	}
	if first[rows[0].id] > first[rows[1].id] {
		t.Errorf("v2 first delivered at %d, before v1 at %d", first[rows[1].id], first[rows[0].id])
	}
	checkOrder(t, got)
	dups, _ := duplicates(got)
	t.Logf("deliveries in order (%d duplicates: the other aggregate's event, republished at each restart):", dups)
	for _, d := range got {
		t.Logf("  %s/%s v%d", d.aggType, d.aggID, d.version)
	}
}

// TestOrderUnderNack: the test queue refuses (x-overflow=reject-publish, max-length-bytes) v1, which does
// not fit, and would accept v2 of the same aggregate, written in one transaction. While the broker nacks
// v1 and the router restarts from the acknowledged position, v2 is never delivered; once the policy is
// cleared, v1 is first delivered before v2.
func TestOrderUnderNack(t *testing.T) {
	e := newStreamEnv(t)
	clear := e.limitQueue(4096)
	c := e.consume(e.queue)
	r := e.startStreaming()
	rows := e.insertVersions("created", 16384, "shipped")
	waitRefusals(t, r, "nacked by the broker")
	expectHeldThenOrdered(t, c, rows, clear)
}

// TestOrderUnderReturn: without an alternate exchange, v1 (order.created, bound to nothing) is returned
// and v2 of the same aggregate (order.shipped, bound) would be routed. While v1 is returned and the router
// restarts, v2 is never delivered; once order.created is bound too, v1 is first delivered before v2.
func TestOrderUnderReturn(t *testing.T) {
	e := newEnv(t)
	e.declare(false, "order.shipped")
	c := e.consume(e.queue)
	r := e.startStreaming("--no-alternate-exchange")
	rows := e.insertVersions("created", 0, "shipped")
	waitRefusals(t, r, "NO_ROUTE")
	expectHeldThenOrdered(t, c, rows, func() {
		ch := e.channel()
		if err := ch.QueueBind(e.queue, "order.created", e.exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	})
}

// BenchmarkBurst writes 1,000 events in one transaction, of one aggregate or of 1,000, and reports events/s
// from the insert to the last delivery. With one aggregate, each event waits for the confirm of the one
// before it (route: at most one unconfirmed event per aggregate).
func BenchmarkBurst(b *testing.B) {
	for _, aggregates := range []int{1, 1000} {
		b.Run(fmt.Sprintf("aggregates=%d", aggregates), func(b *testing.B) {
			const events = 1000
			for range b.N {
				b.StopTimer()
				e := newStreamEnv(b)
				c := e.count(e.queue, events)
				r := e.start("", "--log-level", "info")
				r.waitLog("msg=streaming ", 30*time.Second)
				b.StartTimer()
				began := time.Now()
				_, err := e.db.Exec(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
					SELECT gen_random_uuid(), 'order', 'agg-' || (g % $1), g + 1, 'created',
					       jsonb_build_object('n', g, 'customer', 'someone', 'amount', 12.5)
					FROM generate_series(0, $2 - 1) g`, aggregates, events)
				if err != nil {
					b.Fatal(err)
				}
				c.wait(b, events, 5*time.Minute)
				took := time.Since(began)
				b.StopTimer()
				b.ReportMetric(events/took.Seconds(), "events/s")
				fmt.Printf("%s: %d events of %d aggregate(s) in %v = %.0f events/s\n", b.Name(), events, aggregates,
					took.Round(time.Millisecond), events/took.Seconds())
			}
		})
	}
}
