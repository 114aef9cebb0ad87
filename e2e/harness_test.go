package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// binary is cdc-router built with tags (testenv.Router: with -race as CDC_ROUTER_RACE says).
func binary(t testing.TB, tags string) string {
	t.Helper()
	return testenv.Router(t, tags)
}

// env is one test's world: its own database, slot, exchange and a queue bound to everything.
type env struct {
	t        testing.TB
	pgURL    string
	amqpURL  string
	slot     string
	exchange string
	queue    string
	db       *pgx.Conn
	tags     string // build tags of the binary under test
}

func newEnv(t testing.TB) *env {
	t.Helper()
	return newEnvOn(t, pg)
}

// newEnvOn is newEnv with the test's database on cluster p instead of the suite's.
func newEnvOn(t testing.TB, p *testenv.Postgres) *env {
	t.Helper()
	return newEnvAt(t, p.NewDatabase(t))
}

// newEnvAt is newEnv on the database url names (postgres://.../<db>?...); the slot, exchange and queue
// are named after that database.
func newEnvAt(t testing.TB, url string) *env {
	t.Helper()
	ctx := context.Background()
	e := &env{t: t, pgURL: url, amqpURL: testenv.AMQPURL(t)}
	e.slot = url[strings.LastIndex(url, "/")+1:]
	e.slot = e.slot[:strings.Index(e.slot, "?")]
	e.exchange = "x_" + e.slot
	e.queue = "q_" + e.slot
	var err error
	if e.db, err = pgx.Connect(ctx, e.pgURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close(context.Background()) })
	if err := migrations.Apply(ctx, e.db, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	e.exec(`CREATE TABLE other (id bigserial PRIMARY KEY, note text)`)
	t.Cleanup(e.deleteTopology)
	return e
}

// newStreamEnv is newEnv with the exchange declared as the router declares it and the test queue bound to
// every routing key.
func newStreamEnv(t testing.TB) *env {
	e := newEnv(t)
	e.declare(true, "#")
	return e
}

// newStreamEnvOn is newStreamEnv with the router and the test's consumers on a RabbitMQ node of the test's
// own, for tests that stop the broker or raise its alarms.
func newStreamEnvOn(t testing.TB, node *testenv.RabbitMQNode) *env {
	e := newEnv(t)
	e.amqpURL = node.URL()
	e.declare(true, "#")
	return e
}

// declare declares the exchange exactly as the router does (with or without the alternate exchange), and
// the test's queue bound with each of keys.
func (e *env) declare(alternate bool, keys ...string) {
	e.t.Helper()
	ch := e.channel()
	defer ch.Close()
	args := amqp.Table{"alternate-exchange": e.exchange + ".unroutable"}
	if !alternate {
		args = nil
	}
	if err := ch.ExchangeDeclare(e.exchange, "topic", true, false, false, false, args); err != nil {
		e.t.Fatalf("declare exchange: %v", err)
	}
	if _, err := ch.QueueDeclare(e.queue, true, false, false, false, nil); err != nil {
		e.t.Fatalf("declare queue: %v", err)
	}
	for _, key := range keys {
		if err := ch.QueueBind(e.queue, key, e.exchange, false, nil); err != nil {
			e.t.Fatalf("bind: %v", err)
		}
	}
}

func (e *env) channel() *amqp.Channel {
	e.t.Helper()
	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		e.t.Fatal(err)
	}
	return ch
}

func (e *env) deleteTopology() {
	conn, err := amqp.Dial(e.amqpURL)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	ch.QueueDelete(e.queue, false, false, false)
	ch.QueueDelete(e.exchange+".unroutable", false, false, false)
	ch.ExchangeDelete(e.exchange, false, false)
	ch.ExchangeDelete(e.exchange+".unroutable", false, false)
}

func (e *env) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.db.Exec(context.Background(), sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

// router is a cdc-router process under test.
type router struct {
	*testenv.Process
	t testing.TB
}

// start runs `cdc-router run` for this env with extra flags; amqpURL overrides the broker address.
func (e *env) start(amqpURL string, flags ...string) *router {
	e.t.Helper()
	return e.startBinary(binary(e.t, e.tags), amqpURL, flags...)
}

// startBinary is start with the router binary bin.
func (e *env) startBinary(bin, amqpURL string, flags ...string) *router {
	e.t.Helper()
	if amqpURL == "" {
		amqpURL = e.amqpURL
	}
	cmd := exec.Command(bin, append([]string{"run", "--log-level", "debug"}, flags...)...)
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+e.pgURL, "CDC_ROUTER_AMQP_URL="+amqpURL,
		"CDC_ROUTER_SLOT="+e.slot, "CDC_ROUTER_EXCHANGE="+e.exchange)
	return watchRouter(e.t, cmd)
}

// watchRouter starts cmd as a router under test: killed when the test ends, its output logged when the
// test failed, and a data race it reports fails the test.
func watchRouter(t testing.TB, cmd *exec.Cmd) *router {
	t.Helper()
	p, err := testenv.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	r := &router{Process: p, t: t}
	t.Cleanup(func() {
		p.Kill()
		if race := p.RaceReport(); race != "" {
			t.Errorf("the router reported a data race:\n%s", tail(race, 60))
		}
		if t.Failed() {
			t.Logf("router output:\n%s", tail(p.Output(), 60))
		}
	})
	return r
}

// wait waits for the process to exit and returns its exit code (-1 if it was killed by a signal).
func (r *router) wait(timeout time.Duration) int {
	r.t.Helper()
	code, ok := r.Wait(timeout)
	if !ok {
		r.t.Fatalf("router did not exit within %v; output:\n%s", timeout, tail(r.Output(), 40))
	}
	return code
}

func (r *router) signal(sig syscall.Signal) { r.Signal(sig) }

// waitLog waits until the router's output contains s.
func (r *router) waitLog(s string, timeout time.Duration) {
	r.t.Helper()
	if !r.WaitOutput(s, timeout) {
		r.t.Fatalf("router output has no %q after %v:\n%s", s, timeout, tail(r.Output(), 40))
	}
}

func tail(s string, lines int) string { return testenv.Tail(s, lines) }

// cli runs a cdc-router command for this env to completion and returns its output and exit code.
func (e *env) cli(args ...string) (string, int) {
	e.t.Helper()
	cmd := exec.Command(binary(e.t, e.tags), args...)
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+e.pgURL, "CDC_ROUTER_AMQP_URL="+e.amqpURL)
	out, _ := cmd.CombinedOutput()
	return string(out), cmd.ProcessState.ExitCode()
}

// startStreaming starts the router with flags and waits until it streams.
func (e *env) startStreaming(flags ...string) *router {
	e.t.Helper()
	r := e.start("", flags...)
	r.waitLog("msg=streaming ", 30*time.Second)
	return r
}
