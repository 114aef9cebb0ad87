package e2e

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// groupWorld is the world of the consumer-group fault tests: a RabbitMQ node of the test's own (it is
// restarted mid-run; the shared broker is never touched), the real router on it, 50 accounts and their
// writers, and two projections, ledger-a and ledger-b, each run as a partitioned consumer group of
// groupPartitions partitions. PostgreSQL is the suite's throwaway cluster, which the tests crash and
// restart: they rely on the e2e package's tests running one at a time, as TestEffectivelyOnce does.
type groupWorld struct {
	t      *testing.T
	e      *env
	node   *testenv.RabbitMQNode
	a, b   *consumerGroup
	w      *accountsWriter
	t0     time.Time // the writers' start
	cancel context.CancelFunc
	wait   func()
}

// newGroupWorld starts the node, the router and instances (named "1" to instances) of each group, the
// second through the group's proxy, and waits until every partition of both groups has a consumer.
func newGroupWorld(t *testing.T, instances int) *groupWorld {
	begun := time.Now()
	x := &groupWorld{t: t, node: testenv.StartRabbitMQNodeLikeBroker(t), e: newEnv(t)}
	t.Logf("%5.1fs  RabbitMQ node started", time.Since(begun).Seconds())
	e := x.e
	e.amqpURL = x.node.URL()
	e.exec(accountsSQL)
	e.exec(`INSERT INTO accounts (id, balance, version)
		SELECT format('acct-%s', lpad(i::text, 3, '0')), 0, 0 FROM generate_series(0, 49) i`)
	e.startStreaming() // declares the exchange
	t.Logf("%5.1fs  the router streams", time.Since(begun).Seconds())
	x.a, x.b = newConsumerGroup(t, e, "ledger-a"), newConsumerGroup(t, e, "ledger-b")
	for _, g := range x.groups() {
		for i := 1; i <= instances; i++ {
			name := string(rune('0' + i))
			if i == 2 {
				name += " (proxied)"
			}
			g.start(name, i == 2)
		}
	}
	t.Logf("%5.1fs  instances started", time.Since(begun).Seconds())
	x.a.waitConsumed(time.Minute)
	x.b.waitConsumed(time.Minute)
	t.Logf("%5.1fs  both groups consume their %d partitions", time.Since(begun).Seconds(), groupPartitions)
	return x
}

func (x *groupWorld) groups() []*consumerGroup { return []*consumerGroup{x.a, x.b} }

// write starts writers that change the accounts until finish.
func (x *groupWorld) write(writers int) {
	x.w = &accountsWriter{url: x.e.pgURL, accounts: 50, pause: 15 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	x.cancel, x.wait = cancel, x.w.run(ctx, writers)
	x.t.Cleanup(func() { cancel(); x.wait() })
	x.t0 = time.Now()
}

// at waits until sec seconds after the writers started and logs what happens then.
func (x *groupWorld) at(sec float64, what string) {
	time.Sleep(time.Until(x.t0.Add(time.Duration(sec * float64(time.Second)))))
	x.log(what)
}

// elapsed is the seconds since the writers started.
func (x *groupWorld) elapsed() float64 { return time.Since(x.t0).Seconds() }

func (x *groupWorld) log(what string) {
	x.t.Logf("%5.1fs  %s (%d changes committed so far)", time.Since(x.t0).Seconds(), what, x.w.committed.Load())
}

// restartBroker stops the node's RabbitMQ application (every connection closes: the router's and every
// instance's), runs meanwhile (a sleep, another fault), then starts it again.
func (x *groupWorld) restartBroker(meanwhile func()) {
	x.node.Ctl("stop_app")
	x.log("broker stopped")
	meanwhile()
	x.node.Ctl("start_app") // returns once the application runs: no await_startup, which takes seconds more on a loaded machine
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		c, err := amqp.Dial(x.node.URL())
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			x.t.Fatalf("RabbitMQ node: no AMQP connection a minute after start_app: %v", err)
		}
	}
	x.log("broker started again")
}

// restartPostgres stops the suite's PostgreSQL cluster (mode "immediate": a crash, recovered from the WAL
// at the next start; "fast": a clean stop) and starts it again. Every connection breaks: the router's
// replication stream, the instances' pools, the writers'.
func (x *groupWorld) restartPostgres(mode string) {
	e := x.e
	e.db.Close(context.Background())
	pg.Stop(mode)
	time.Sleep(500 * time.Millisecond)
	if err := pg.Start(); err != nil {
		x.t.Fatal(err)
	}
	var err error
	if e.db, err = pgx.Connect(context.Background(), e.pgURL); err != nil {
		x.t.Fatal(err)
	}
	x.log("PostgreSQL started again")
}

// finish stops the writers (log it with at first), waits until both groups applied every event, stops the running instances
// gracefully and checks each projection (consumerGroup.check).
func (x *groupWorld) finish(timeout time.Duration) {
	t := x.t
	x.cancel()
	x.wait()
	published := number(t, x.e.db, `SELECT count(*) FROM outbox`)
	for _, g := range x.groups() {
		g.waitApplied(published, timeout)
	}
	t.Logf("%5.1fs  every event applied by both groups, partitions empty", time.Since(x.t0).Seconds())
	for _, g := range x.groups() {
		for name, p := range g.instances {
			select {
			case <-p.done:
				continue // killed or stopped by the test
			default:
			}
			if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
				t.Errorf("%s instance %s exited with %d after SIGTERM, want 0", g.consumer, name, code)
			}
		}
		g.check(published)
	}
	t.Logf("writers: %d changes, %d lost races decided again, %d reconnects", x.w.committed.Load(),
		x.w.lostRaces.Load(), x.w.reconnects.Load())
}

// TestShortConsumerGroupUnderFaults is TestConsumerGroupUnderFaults (build tag consumergroups) cut to what
// CI can afford (about 40 s): two projections, each a group of 4 partitions with three instances, on a
// RabbitMQ node of the test's own (of the suite's broker's version: RabbitMQ 4.0 in the version matrix);
// while writers change 50 accounts, an instance of each group is SIGKILLed and another started, the
// proxied instances' broker connections are cut, and the node's RabbitMQ stops (every connection of the
// router and the instances closes) and, while it is down, PostgreSQL crashes (immediate stop) and starts
// again, then RabbitMQ starts again. At the end, for each
// projection, every event was applied exactly once, in version order, none ever parked, and the balances
// equal the accounts table.
func TestShortConsumerGroupUnderFaults(t *testing.T) {
	begun := time.Now()
	x := newGroupWorld(t, 3)
	a, b := x.a, x.b
	x.write(2)
	x.at(1.5, "ledger-a instance 1 and ledger-b instance 3 SIGKILL")
	a.instances["1"].stop(syscall.SIGKILL, 10*time.Second)
	b.instances["3"].stop(syscall.SIGKILL, 10*time.Second)
	x.at(2.5, "ledger-a instance 1 started again, ledger-b instance 4 joins; proxied connections cut")
	a.start("1 (restarted)", false)
	b.start("4", false)
	a.proxy.Cut()
	b.proxy.Cut()
	x.at(3.5, "broker stop_app; PostgreSQL crashes (immediate stop) while it is down")
	x.restartBroker(func() { x.restartPostgres("immediate") })
	x.at(max(7, x.elapsed()+2), "writers stop") // a few changes after every fault
	x.finish(2 * time.Minute)
	t.Logf("%5.1fs  in all", time.Since(begun).Seconds())
}
