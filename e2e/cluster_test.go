//go:build cluster

package e2e

// The cluster tests run the router against a three-node RabbitMQ cluster that
// internal/testenv/rabbitmq-cluster.sh starts beside the system broker, with a quorum queue bound to the
// exchange, and take a node away while writers run. They need the build tag: `make test-cluster`.

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Test settings: a small window keeps the unacknowledged part of the stream, which a restart publishes
// again, small.
const (
	clusterLanes  = 4
	clusterWindow = 64
	// recoveryBound is what a case may take from the node's loss to the delivery of an event written
	// after it. Measured medians are in docs/scaling.md; this is a generous ceiling, not a benchmark.
	recoveryBound = 60 * time.Second
)

// rabbitCluster is the three-node cluster of rabbitmq-cluster.sh.
type rabbitCluster struct {
	t      testing.TB
	script string
	urls   []string // AMQP URL of node 1..3 at index 0..2
}

func startCluster(t testing.TB) *rabbitCluster {
	t.Helper()
	script, err := filepath.Abs("../internal/testenv/rabbitmq-cluster.sh")
	if err != nil {
		t.Fatal(err)
	}
	c := &rabbitCluster{t: t, script: script}
	began := time.Now()
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop").CombinedOutput(); err != nil {
			t.Errorf("rabbitmq-cluster.sh stop: %v\n%s", err, out)
		}
	})
	out := c.run("start")
	c.urls = strings.Split(strings.TrimSpace(lastLine(out)), ",")
	if len(c.urls) != 3 {
		t.Fatalf("rabbitmq-cluster.sh start printed %q, want three URLs", out)
	}
	t.Logf("3-node cluster up in %v", time.Since(began).Round(100*time.Millisecond))
	return c
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// run runs the script with args and fails the test when it fails.
func (c *rabbitCluster) run(args ...string) string {
	c.t.Helper()
	out, err := exec.Command(c.script, args...).CombinedOutput()
	if err != nil {
		c.t.Fatalf("rabbitmq-cluster.sh %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// list is the AMQP URL list with node first first, then the others in order.
func (c *rabbitCluster) list(first int) string {
	urls := []string{c.urls[first-1]}
	for n := 1; n <= 3; n++ {
		if n != first {
			urls = append(urls, c.urls[n-1])
		}
	}
	return strings.Join(urls, ",")
}

// port is node n's AMQP port.
func (c *rabbitCluster) port(n int) string {
	return c.urls[n-1][strings.LastIndex(c.urls[n-1], ":")+1 : len(c.urls[n-1])-1]
}

// channel opens a channel on node n, closed at cleanup.
func (c *rabbitCluster) channel(n int) *amqp.Channel {
	c.t.Helper()
	conn, err := amqp.Dial(c.urls[n-1])
	if err != nil {
		c.t.Fatalf("connect to node %d: %v", n, err)
	}
	c.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		c.t.Fatal(err)
	}
	return ch
}

// declare declares, through node leader, the exchange as the router declares it and a quorum queue bound
// to everything, whose leader is then on that node (client-local leader placement).
func (c *rabbitCluster) declare(e *env, leader int) {
	c.t.Helper()
	ch := c.channel(leader)
	args := amqp.Table{"alternate-exchange": e.exchange + ".unroutable"}
	if err := ch.ExchangeDeclare(e.exchange, "topic", true, false, false, false, args); err != nil {
		c.t.Fatalf("declare exchange: %v", err)
	}
	qargs := amqp.Table{"x-queue-type": "quorum", "x-queue-leader-locator": "client-local"}
	if _, err := ch.QueueDeclare(e.queue, true, false, false, false, qargs); err != nil {
		c.t.Fatalf("declare quorum queue: %v", err)
	}
	if err := ch.QueueBind(e.queue, "#", e.exchange, false, nil); err != nil {
		c.t.Fatalf("bind: %v", err)
	}
	if got := c.leader(e.queue); got != leader {
		c.t.Fatalf("the quorum queue's leader is on node %d, want %d", got, leader)
	}
}

var nodeNumber = regexp.MustCompile(`cdccluster(\d)@`)

// leader is the node number of the quorum queue's leader, 0 when none is known.
func (c *rabbitCluster) leader(queue string) int {
	c.t.Helper()
	for n := 1; n <= 3; n++ {
		cmd := exec.Command("rabbitmqctl", "-n", fmt.Sprintf("cdccluster%d@localhost", n), "-q", "list_queues", "name", "leader")
		out, err := cmd.CombinedOutput()
		if err != nil {
			continue // that node is down
		}
		for _, line := range strings.Split(string(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && f[0] == queue {
				if m := nodeNumber.FindStringSubmatch(f[1]); m != nil {
					k, _ := strconv.Atoi(m[1])
					return k
				}
			}
		}
	}
	return 0
}

// consume consumes the queue through node n with manual acknowledgements, recording each message once
// per delivery by the router: a redelivery by the broker (Redelivered) of an id already seen is not the
// router's duplicate and is left out.
func (c *rabbitCluster) consume(n int, queue string) *consumer {
	c.t.Helper()
	ch := c.channel(n)
	if err := ch.Qos(500, 0, false); err != nil {
		c.t.Fatal(err)
	}
	msgs, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		c.t.Fatalf("consume %s: %v", queue, err)
	}
	cons := &consumer{}
	go func() {
		seen := map[string]bool{}
		for m := range msgs {
			if !(m.Redelivered && seen[m.MessageId]) {
				seen[m.MessageId] = true
				v, _ := m.Headers["aggregate_version"].(int64)
				at, _ := m.Headers["aggregate_type"].(string)
				ai, _ := m.Headers["aggregate_id"].(string)
				cons.mu.Lock()
				cons.deliveries = append(cons.deliveries, delivery{m.MessageId, at, ai, m.RoutingKey, v, m})
				cons.mu.Unlock()
			}
			m.Ack(false)
		}
	}()
	return cons
}

// connectedNode is the node of the router's last "connected to RabbitMQ" line.
func (c *rabbitCluster) connectedNode(r *router) int {
	out := r.Output()
	i := strings.LastIndex(out, "connected to RabbitMQ")
	if i < 0 {
		return 0
	}
	line, _, _ := strings.Cut(out[i:], "\n")
	for n := 1; n <= 3; n++ {
		if strings.Contains(line, "address=127.0.0.1:"+c.port(n)+" ") {
			return n
		}
	}
	return 0
}

// waitDelivered waits until id was delivered and returns when.
func waitDelivered(t testing.TB, c *consumer, id string, timeout time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, d := range c.snapshot() {
			if d.id == id {
				return time.Now()
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the event written after the fault was not delivered within %v", timeout)
	return time.Time{}
}

var logTime = regexp.MustCompile(`time=(\S+)`)

// streamGap is, in the router's log from byte from on, the time from the first failure (the "stream
// stopped" line) to the next "streaming" line: how long the router did not stream. ok is false without a
// restart.
func streamGap(out string, from int) (gap time.Duration, ok bool) {
	out = out[from:]
	i := strings.Index(out, "msg=\"stream stopped")
	if i < 0 {
		return 0, false
	}
	j := strings.Index(out[i:], "msg=streaming ")
	if j < 0 {
		return 0, false
	}
	at := func(k int) time.Time {
		line := out[strings.LastIndex(out[:k], "\n")+1 : k]
		m := logTime.FindStringSubmatch(line)
		if m == nil {
			return time.Time{}
		}
		t, _ := time.Parse(time.RFC3339Nano, m[1])
		return t
	}
	return at(i + j).Sub(at(i)), true
}

var streamingLSN = regexp.MustCompile(`msg=streaming [^\n]*? lsn=(\S+)`)

// checkDuplicatesUnacknowledged asserts that every event delivered more than once lies after a position
// the router restarted from (its acknowledged position, logged on the "streaming" line), and came at most
// once per restart more: the duplicates are the unacknowledged window, nothing older.
func checkDuplicatesUnacknowledged(t testing.TB, got []delivery, log string, restarts int) {
	t.Helper()
	var from cdc.LSN
	for _, m := range streamingLSN.FindAllStringSubmatch(log, -1) {
		l, err := cdc.ParseLSN(m[1])
		if err != nil {
			t.Fatalf("streaming line with lsn %q: %v", m[1], err)
		}
		if from == 0 || l < from {
			from = l
		}
	}
	count := map[string]int{}
	for _, d := range got {
		count[d.id]++
	}
	bad := 0
	for _, d := range got {
		if count[d.id] < 2 {
			continue
		}
		commit, _ := d.msg.Headers["commit_lsn"].(string)
		l, err := cdc.ParseLSN(commit)
		if err != nil || restarts == 0 || l < from || count[d.id] > 1+restarts {
			if bad < 5 {
				t.Errorf("event %s (commit %s) delivered %d times with %d restarts from %v: not an unacknowledged event",
					d.id, commit, count[d.id], restarts, from)
			}
			bad++
		}
	}
	if bad > 0 {
		t.Errorf("%d deliveries are duplicates of events the router had acknowledged", bad)
	}
}

// clusterCase is one fault: the quorum queue's leader, the node the router connects to first, the node
// the consumer reads through, and the fault on a node.
type clusterCase struct {
	name                    string
	leader, router, reader  int
	fault                   func(c *rabbitCluster) int // injects the fault, returns the node it took away
	routerMustLoseItsBroker bool
}

// TestCluster runs the three node faults one after the other on one cluster, restarting the lost node in
// between. Each: nothing lost, first deliveries per aggregate in order, duplicates only of events after the
// position the router restarted from, and an event written after the fault delivered within recoveryBound.
func TestCluster(t *testing.T) {
	cl := startCluster(t)
	cases := []clusterCase{
		{name: "ConnectedNodeStopped", leader: 1, router: 2, reader: 3, routerMustLoseItsBroker: true,
			fault: func(c *rabbitCluster) int { c.run("stop-node", "2"); return 2 }},
		{name: "LeaderNodeStopped", leader: 1, router: 2, reader: 3,
			fault: func(c *rabbitCluster) int { c.run("stop-node", "1"); return 1 }},
		{name: "ConnectedLeaderNodeKilled", leader: 1, router: 1, reader: 3, routerMustLoseItsBroker: true,
			fault: func(c *rabbitCluster) int { c.run("kill-node", "1"); return 1 }},
	}
	for _, tc := range cases {
		ok := t.Run(tc.name, func(t *testing.T) {
			sub := *cl
			sub.t = t
			clusterFault(t, &sub, tc)
		})
		if !ok {
			return // the cluster may be left in a state the next case does not expect
		}
	}
}

func clusterFault(t *testing.T, cl *rabbitCluster, tc clusterCase) {
	e := newEnv(t)
	cl.declare(e, tc.leader)
	c := cl.consume(tc.reader, e.queue)
	r := e.start(cl.list(tc.router), "--lanes", strconv.Itoa(clusterLanes), "--window", strconv.Itoa(clusterWindow),
		"--unroutable-queue-type", "quorum")
	r.waitLog("msg=streaming ", 30*time.Second)
	if got := cl.connectedNode(r); got != tc.router {
		t.Fatalf("the router connected to node %d, want %d (the first of its list)", got, tc.router)
	}
	w := newWriter(t, e.pgURL, 200)
	var stopOnce sync.Once
	stopWriter := writeUntilStopped(w)
	stop := func() { stopOnce.Do(stopWriter) }
	defer stop()
	time.Sleep(3 * time.Second)
	logBefore := len(r.Output())
	restartsBefore := strings.Count(r.Output(), "msg=streaming ")
	began := time.Now()
	lost := tc.fault(cl)
	down := time.Now()
	var once sync.Once
	restore := func() { once.Do(func() { cl.run("start-node", strconv.Itoa(lost)) }) }
	defer restore()
	marker := e.insertOne("outbox", "marker-"+tc.name)
	at := waitDelivered(t, c, marker, recoveryBound)
	time.Sleep(3 * time.Second) // writers go on on the new connection
	stop()
	restore()
	got := c.waitFor(t, w.rows, 120*time.Second)
	restarts := strings.Count(r.Output(), "msg=streaming ") - restartsBefore
	dups, _ := duplicates(got)
	gap, _ := streamGap(r.Output(), logBefore)
	t.Logf("%s: node %d lost after %v to take it away; an event written after it delivered %v later; "+
		"%d restarts, not streaming for %v; router now on node %d, queue leader on node %d; %d events, %d deliveries, %d duplicates",
		tc.name, lost, down.Sub(began).Round(10*time.Millisecond), at.Sub(down).Round(10*time.Millisecond),
		restarts, gap.Round(time.Millisecond), cl.connectedNode(r), cl.leader(e.queue), len(w.rows), len(got), dups)
	if extra := unexpected(got, append(w.rows, row{id: marker})); len(extra) > 0 {
		t.Errorf("%d deliveries of events never committed", len(extra))
	}
	checkOrder(t, got)
	checkDuplicatesUnacknowledged(t, got, r.Output()[logBefore:], restarts)
	for _, line := range strings.Split(r.Output()[logBefore:], "\n") {
		if _, reason, ok := strings.Cut(line, `msg="stream stopped; restarting from the acknowledged position"`); ok {
			t.Logf("restart:%.300s", reason)
		}
	}
	if tc.routerMustLoseItsBroker {
		if restarts < 1 {
			t.Errorf("the router did not restart after losing its node")
		}
		if n := cl.connectedNode(r); n == lost {
			t.Errorf("the router is still on node %d, which was taken away", n)
		}
	}
	if strings.Contains(r.Output(), "guest:guest@") || strings.Contains(r.Output(), ":guest@") {
		t.Errorf("the router logged a password")
	}
}
