package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// cutThroughProxy runs a stream through a proxy that stalls the router's broker connection (so a whole
// window stays unconfirmed) and then cuts it. It returns how many events never arrived and the order check.
func cutThroughProxy(t testing.TB, tags string, settle time.Duration) (lost int, e *env, c *consumer, w *writer) {
	e = newStreamEnv(t)
	e.tags = tags
	c = e.consume(e.queue)
	p := testenv.NewProxy(t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
	r := e.start("amqp://guest:guest@" + p.Addr + "/")
	r.waitLog("msg=streaming ", 20*time.Second)
	w = newWriter(t, e.pgURL, 50)
	w.write(500, 20, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	p.Pause()
	w.write(3000, 20, 0) // published into the stalled connection: none can be confirmed
	time.Sleep(2 * time.Second)
	p.Cut()
	w.write(500, 20, 0)
	deadline := time.Now().Add(settle)
	for {
		got := c.snapshot()
		seen := map[string]bool{}
		for _, d := range got {
			seen[d.id] = true
		}
		lost = 0
		for _, r := range w.rows {
			if !seen[r.id] {
				lost++
			}
		}
		if lost == 0 || time.Now().After(deadline) {
			return lost, e, c, w
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestBrokerCutWithUnconfirmedWindowLosesNothing cuts the broker connection while a whole window is
// unconfirmed: every event still arrives, and first deliveries per aggregate stay in order.
func TestBrokerCutWithUnconfirmedWindowLosesNothing(t *testing.T) {
	lost, _, c, w := cutThroughProxy(t, "", 45*time.Second)
	got := c.snapshot()
	dups, _ := duplicates(got)
	t.Logf("broker cut: %d events, %d deliveries, %d duplicates, %d lost", len(w.rows), len(got), dups, lost)
	if lost != 0 {
		t.Fatalf("%d events lost after the broker connection was cut", lost)
	}
	checkOrder(t, got)
}

// TestBrokerCutCatchesAckOnReceipt runs the same cut against a router built to acknowledge on receipt
// (-tags unsafeack): the test must see the loss, which shows it can tell a wrong router from a right one.
func TestBrokerCutCatchesAckOnReceipt(t *testing.T) {
	lost, _, _, w := cutThroughProxy(t, "unsafeack", 8*time.Second)
	t.Logf("ack on receipt: %d of %d events lost", lost, len(w.rows))
	if lost == 0 {
		t.Fatal("a router that acknowledges on receipt lost nothing: the broker-cut test cannot tell it from a correct one")
	}
}

func rabbitmqctl(t testing.TB, args ...string) {
	t.Helper()
	out, err := testenv.Rabbitmqctl(t, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %v: %v: %s", args, err, out)
	}
}

// TestBrokerClosesConnectionsWhilePublishersAreBlocked blocks every publisher with a memory alarm, lets a
// window of events pile up unconfirmed, closes every connection from the server side, then lifts the alarm.
// The alarm is broker-wide, so the test runs on a RabbitMQ node of its own (the shared broker is never
// touched). While blocked, /metrics shows the
// broker's connection.blocked (cdc_router_broker_blocked 1) and a lag that grows, and /readyz is 503 naming
// the block (the chaos harness's seed 73: an alarm longer than the stall bound was a silent stall).
func TestBrokerClosesConnectionsWhilePublishersAreBlocked(t *testing.T) {
	node := testenv.StartRabbitMQNode(t)
	e := newStreamEnvOn(t, node)
	addr := freeAddr(t)
	r := e.startStreaming("--http-addr", addr)
	w := newWriter(t, e.pgURL, 50)
	w.write(300, 20, 0)
	if v := scrapeMetrics(t, addr).value(t, "cdc_router_broker_blocked"); v != 0 {
		t.Errorf("cdc_router_broker_blocked = %v before the alarm, want 0", v)
	}
	lift := node.RaiseMemoryAlarm()
	w.write(2000, 20, 0)
	r.waitLog("blocked", 20*time.Second)
	lag0 := scrapeMetrics(t, addr).value(t, "cdc_router_replication_lag_seconds")
	time.Sleep(2 * time.Second)
	m := scrapeMetrics(t, addr)
	if v := m.value(t, "cdc_router_broker_blocked"); v != 1 {
		t.Errorf("cdc_router_broker_blocked = %v under a memory alarm, want 1", v)
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != 503 || !strings.Contains(body, "connection.blocked") {
		t.Errorf("/readyz = %d %s under a memory alarm, want 503 naming connection.blocked", code, body)
	}
	if lag := m.value(t, "cdc_router_replication_lag_seconds"); lag < lag0+1 {
		t.Errorf("cdc_router_replication_lag_seconds went from %.2f to %.2f over 2 s blocked, want it to grow", lag0, lag)
	}
	node.Ctl("close_all_connections", "cdc-router test: broker-side cut")
	lift()
	w.write(300, 20, 0)
	c := e.consume(e.queue)
	expectEveryEventInOrder(t, c, w, "blocked then closed", 60*time.Second)
}

// TestBrokerRestartMidStream stops the RabbitMQ application in the middle of a stream and starts it again:
// the router retries with backoff while the broker is away and every event arrives afterwards. On a
// RabbitMQ node of its own: stopping the shared broker would cut every other suite's connections.
func TestBrokerRestartMidStream(t *testing.T) {
	node := testenv.StartRabbitMQNode(t)
	e := newStreamEnvOn(t, node)
	r := e.startStreaming()
	w := newWriter(t, e.pgURL, 50)
	w.write(500, 20, 0)
	node.Ctl("stop_app")
	w.write(1000, 20, 0) // committed while the broker is down
	r.waitLog("restarting from the acknowledged position", 30*time.Second)
	node.Restart()
	w.write(500, 20, 0)
	c := e.consume(e.queue)
	expectEveryEventInOrder(t, c, w, "broker restarted mid-stream", 90*time.Second)
}
