package e2e

import (
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// groupPartitions is the partition count of the consumer-group fault tests' two groups.
const groupPartitions = 4

// consumerGroup is one projection run as a partitioned consumer group (runner.Config.Partitions): its
// instances (internal/e2e/accountsconsumer processes), one of them at a time connected through a proxy.
type consumerGroup struct {
	t         *testing.T
	e         *env
	consumer  string
	queue     string
	tally     *outcomeTally
	proxy     *testenv.Proxy
	proxied   string
	instances map[string]*projection
}

func newConsumerGroup(t *testing.T, e *env, consumer string) *consumerGroup {
	g := &consumerGroup{t: t, e: e, consumer: consumer, queue: e.queue + "-" + consumer, tally: &outcomeTally{},
		instances: map[string]*projection{}}
	u, err := amqp.ParseURI(e.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	g.proxy = testenv.NewProxy(t, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	u.Host, u.Port = splitAddr(t, g.proxy.Addr)
	g.proxied = u.String()
	t.Cleanup(func() { // after the instances' cleanups (registered later, run earlier)
		conn, err := amqp.Dial(e.amqpURL)
		if err != nil {
			return
		}
		defer conn.Close()
		ch, err := conn.Channel()
		if err != nil {
			return
		}
		for i := range groupPartitions {
			ch.QueueDelete(g.partition(i), false, false, false)
		}
		for k := range 2*groupPartitions + 4 {
			ch.QueueDelete(fmt.Sprintf("%s.partitions-%d.member-%d", g.queue, groupPartitions, k), false, false, false)
		}
		ex := fmt.Sprintf("%s.partitions-%d", g.queue, groupPartitions)
		ch.ExchangeDelete(ex, false, false)
		ch.QueueDelete(ex+".unrouted", false, false, false)
		ch.ExchangeDelete(ex+".unrouted", false, false)
	})
	return g
}

func (g *consumerGroup) partition(i int) string {
	return fmt.Sprintf("%s.%d-of-%d", g.queue, i, groupPartitions)
}

// start runs instance name, through the proxy when proxied.
func (g *consumerGroup) start(name string, proxied bool) {
	url := g.e.amqpURL
	if proxied {
		url = g.proxied
	}
	g.startAt(name, url)
}

// startAt runs instance name on the AMQP URLs urls (comma-separated), with more environment settings.
func (g *consumerGroup) startAt(name, urls string, env ...string) {
	g.instances[name] = startProjection(g.t, g.consumer+" "+name, append([]string{"E2E_PG_URL=" + g.e.pgURL, "E2E_AMQP_URL=" + urls,
		"E2E_EXCHANGE=" + g.e.exchange, "E2E_QUEUE=" + g.queue, "E2E_CONSUMER=" + g.consumer,
		"E2E_PARTITIONS=" + strconv.Itoa(groupPartitions)}, env...), g.tally)
}

// partitions is the ready messages and the consumers of each partition queue (-1 when it cannot be read).
func (g *consumerGroup) partitions() (ready, consumers []int) {
	conn, err := amqp.Dial(g.e.amqpURL)
	if err != nil {
		return nil, nil
	}
	defer conn.Close()
	for i := range groupPartitions {
		ch, err := conn.Channel()
		if err != nil {
			return nil, nil
		}
		q, err := ch.QueueDeclarePassive(g.partition(i), true, false, false, false, nil)
		if err != nil {
			ready, consumers = append(ready, -1), append(consumers, -1)
			continue
		}
		ready, consumers = append(ready, q.Messages), append(consumers, q.Consumers)
		ch.Close()
	}
	return ready, consumers
}

// waitConsumed waits until every partition has a consumer.
func (g *consumerGroup) waitConsumed(timeout time.Duration) {
	for deadline := time.Now().Add(timeout); ; time.Sleep(100 * time.Millisecond) {
		_, consumers := g.partitions()
		ok := len(consumers) == groupPartitions
		for _, c := range consumers {
			ok = ok && c >= 1
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("group %s: partitions' consumers %v after %v", g.consumer, consumers, timeout)
		}
	}
}

// waitApplied waits until the group applied every published event, nothing is parked, its partitions are
// empty and its instances have reported nothing new for two seconds.
func (g *consumerGroup) waitApplied(published int64, timeout time.Duration) {
	var applied, parked int64
	var ready []int
	lines, still := -1, 0
	for deadline := time.Now().Add(timeout); ; time.Sleep(250 * time.Millisecond) {
		applied = number(g.t, g.e.db, `SELECT count(*) FROM inbox.inbox WHERE consumer = $1 AND status = 'applied'`, g.consumer)
		parked = number(g.t, g.e.db, `SELECT count(*) FROM inbox.parked WHERE consumer = $1`, g.consumer)
		ready, _ = g.partitions()
		empty := len(ready) == groupPartitions
		for _, r := range ready {
			empty = empty && r == 0
		}
		if _, _, n := g.tally.snapshot(); n == lines {
			still++
		} else {
			lines, still = n, 0
		}
		if applied == published && parked == 0 && empty && still >= 8 {
			return
		}
		if time.Now().After(deadline) {
			g.t.Fatalf("group %s after %v: %d of %d events applied, %d parked, ready %v", g.consumer, timeout, applied, published, parked, ready)
		}
	}
}

// check asserts what the projection's owner checks: balances and versions equal the accounts table, one
// applied inbox record and one handler application per outbox event, nothing parked (now or ever), failed
// or left retrying.
func (g *consumerGroup) check(published int64) {
	t, c := g.t, g.consumer
	for _, check := range []struct{ what, sql string }{
		{"accounts whose projected balance or version differs from the accounts table", `SELECT count(*) FROM accounts a
			FULL JOIN (SELECT * FROM account_projection WHERE consumer = $1) p ON p.id = a.id
			WHERE a.id IS NULL OR a.balance <> coalesce(p.balance, 0) OR a.version <> coalesce(p.version, 0)`},
		{"outbox events without exactly one applied inbox record, or inbox records without an event", `SELECT count(*)
			FROM outbox e FULL JOIN (SELECT * FROM inbox.inbox WHERE consumer = $1) i ON i.event_id = e.id::text
			WHERE e.id IS NULL OR i.event_id IS NULL OR i.status <> 'applied'`},
		{"outbox events not applied exactly once by the handler (apply_counter)", `SELECT count(*)
			FROM outbox e FULL JOIN (SELECT * FROM apply_counter WHERE consumer = $1) a ON a.event_id = e.id::text
			WHERE e.id IS NULL OR a.event_id IS NULL OR a.count <> 1`},
		{"parked events", `SELECT count(*) FROM inbox.parked WHERE consumer = $1`},
		{"failed events (an out-of-order version fails in the handler)", `SELECT count(*) FROM inbox.failed WHERE consumer = $1`},
		{"attempt counts left behind", `SELECT count(*) FROM inbox.attempts WHERE consumer = $1`},
	} {
		if n := number(t, g.e.db, check.sql, c); n != 0 {
			t.Errorf("group %s: %d %s", c, n, check.what)
		}
	}
	kinds, unparked, lines := g.tally.snapshot()
	if kinds["parked"] != 0 || kinds["gap"] != 0 || unparked != 0 {
		t.Errorf("group %s: %d events parked, %d gaps, %d unparked at least once; want none", c, kinds["parked"], kinds["gap"], unparked)
	}
	t.Logf("group %s: %d events, %d deliveries reported: %v", c, published, lines, kinds)
}
