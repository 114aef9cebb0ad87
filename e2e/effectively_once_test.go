package e2e

import (
	"context"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// effectivelyOnceConsumer is the consumer name both instances of the projection share.
const effectivelyOnceConsumer = "accounts-projection"

// TestEffectivelyOnce runs the whole promise end to end: writers that change 50 accounts the producer way
// (docs/producers.md), the real router, and two instances of one projection (internal/e2e/accountsconsumer,
// the inbox Runner) sharing a queue, under a router SIGKILL, a projection SIGKILL, a cut of one instance's
// broker connection, a backfill of some accounts while streaming, a broker restart and a PostgreSQL fast
// restart. At the end every projected balance equals the accounts table, the inbox holds exactly one
// applied record per outbox event for the consumer, nothing is parked or failed, every event was applied
// exactly once (apply_counter), and the reconciliation queries of docs/producers.md find nothing.
// The broker restart is of a RabbitMQ node of the test's own (the shared broker is never stopped); the
// PostgreSQL restart is of the suite's throwaway cluster, so the test relies on `go test -p 1`.
func TestEffectivelyOnce(t *testing.T) {
	x := newAccountsWorld(t)
	ctx, stopWriters := context.WithCancel(context.Background())
	waitWriters := x.w.run(ctx, 4)
	t.Cleanup(func() { stopWriters(); waitWriters() })
	x.t0 = time.Now()
	x.injectFaults()

	x.at(38, "writers stop")
	stopWriters()
	waitWriters()
	published := number(t, x.e.db, `SELECT count(*) FROM outbox`)
	waitApplied(t, x.e, x.tally, published, 2*time.Minute)
	t.Logf("%5.1fs  every event applied, queue empty", time.Since(x.t0).Seconds())
	for _, p := range []*projection{x.a, x.b} {
		if code := p.stop(syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Errorf("projection %s exited with %d after SIGTERM, want 0", p.name, code)
		}
	}
	checkEffectivelyOnce(t, x.e.db, published, x.begun)
	x.report(published)
	x.checkFaultsArrived()
}

// accountsWorld is TestEffectivelyOnce's world: the accounts and their writers, the router, and the two
// instances of the projection, b connected to the broker through a proxy.
type accountsWorld struct {
	t         *testing.T
	e         *env
	r         *router
	a, b      *projection
	proxy     *testenv.Proxy
	proxied   string // b's AMQP URL
	tally     *outcomeTally
	node      *testenv.RabbitMQNode // the broker of this test alone: it is stopped mid-run
	w         *accountsWriter
	begun, t0 time.Time // the test's start, the writers' start
}

func newAccountsWorld(t *testing.T) *accountsWorld {
	x := &accountsWorld{t: t, begun: time.Now(), node: testenv.StartRabbitMQNode(t), e: newEnv(t), tally: &outcomeTally{}}
	e := x.e
	e.amqpURL = x.node.URL()
	// The exchange as the router declares it and the projection's queue bound as the runner binds it, so
	// that no event is unroutable before the instances have started.
	e.declare(true, "account.#")
	e.exec(accountsSQL)
	e.exec(`INSERT INTO accounts (id, balance, version)
		SELECT format('acct-%s', lpad(i::text, 3, '0')), 0, 0 FROM generate_series(0, 49) i`)
	x.r = e.startStreaming()
	u, err := amqp.ParseURI(e.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	x.proxy = testenv.NewProxy(t, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
	u.Host, u.Port = splitAddr(t, x.proxy.Addr)
	x.proxied = u.String()
	x.a = x.instance("a", e.amqpURL)
	x.b = x.instance("b (through a proxy)", x.proxied)
	waitConsumers(t, e, 2, time.Minute)
	x.w = &accountsWriter{url: e.pgURL, accounts: 50, pause: 60 * time.Millisecond}
	return x
}

// instance starts an instance of the projection.
func (x *accountsWorld) instance(name, amqpURL string) *projection {
	e := x.e
	return startProjection(x.t, name, []string{"E2E_PG_URL=" + e.pgURL, "E2E_AMQP_URL=" + amqpURL,
		"E2E_EXCHANGE=" + e.exchange, "E2E_QUEUE=" + e.queue, "E2E_CONSUMER=" + effectivelyOnceConsumer}, x.tally)
}

// at waits until sec seconds after the writers started and logs what happens then.
func (x *accountsWorld) at(sec float64, what string) {
	time.Sleep(time.Until(x.t0.Add(time.Duration(sec * float64(time.Second)))))
	x.t.Logf("%5.1fs  %s (%d changes committed so far)", time.Since(x.t0).Seconds(), what, x.w.committed.Load())
}

// injectFaults runs the faults one after the other while the writers write.
func (x *accountsWorld) injectFaults() {
	t, e := x.t, x.e
	x.at(5, "router SIGKILL")
	x.r.signal(syscall.SIGKILL)
	x.r.wait(10 * time.Second)
	time.Sleep(time.Second)
	x.r = e.startStreaming()

	x.at(10, "projection instance a SIGKILL")
	x.a.stop(syscall.SIGKILL, 10*time.Second)
	time.Sleep(time.Second)
	x.a = x.instance("a (restarted)", e.amqpURL)

	x.at(14, "instance b's broker connection cut")
	x.proxy.Cut()

	x.at(18, "backfill of 5 accounts while streaming")
	where := "aggregate_type = 'account' AND aggregate_id IN ('acct-000', 'acct-002', 'acct-011', 'acct-023', 'acct-042')"
	out, code := e.cli("backfill", "--where", where, "--exchange", e.exchange)
	if code != 0 {
		t.Fatalf("backfill: exit %d\n%s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "backfill ") {
			t.Logf("        %s", line)
		}
	}

	x.at(22, "broker stop_app")
	x.node.Ctl("stop_app")
	time.Sleep(3 * time.Second)
	x.node.Restart()
	t.Logf("%5.1fs  broker started again", time.Since(x.t0).Seconds())

	x.at(32, "PostgreSQL fast restart")
	e.db.Close(context.Background())
	pg.Stop("fast")
	time.Sleep(500 * time.Millisecond)
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.db, err = pgx.Connect(context.Background(), e.pgURL); err != nil {
		t.Fatal(err)
	}
	t.Logf("%5.1fs  PostgreSQL started again", time.Since(x.t0).Seconds())
}
