package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

var (
	pg     *testenv.Postgres
	binDir string
)

func TestMain(m *testing.M) {
	var err error
	if pg, err = testenv.StartPostgres(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir, _ = os.MkdirTemp("", "cdc-router-bin-")
	code := m.Run()
	pg.Close()
	os.RemoveAll(binDir)
	os.Exit(code)
}

var buildOnce sync.Map // tags -> *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// binary builds cdc-router once per set of build tags and returns its path.
func binary(t testing.TB, tags string) string {
	t.Helper()
	v, _ := buildOnce.LoadOrStore(tags, &buildResult{})
	b := v.(*buildResult)
	b.once.Do(func() {
		b.path = filepath.Join(binDir, "cdc-router"+strings.ReplaceAll(tags, ",", "_"))
		args := []string{"build", "-o", b.path}
		if raceEnabled {
			args = append(args, "-race")
		}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
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
	t      testing.TB
	cmd    *exec.Cmd
	mu     sync.Mutex
	out    bytes.Buffer
	done   chan struct{}
	exitAt time.Time
}

func (r *router) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.Write(p)
}

// Output is what the process wrote to stderr so far.
func (r *router) Output() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.out.String()
}

// start runs `cdc-router run` for this env with extra flags; amqpURL overrides the broker address.
func (e *env) start(amqpURL string, flags ...string) *router {
	e.t.Helper()
	if amqpURL == "" {
		amqpURL = e.amqpURL
	}
	r := &router{t: e.t, done: make(chan struct{})}
	args := append([]string{"run", "--log-level", "debug"}, flags...)
	r.cmd = exec.Command(binary(e.t, e.tags), args...)
	r.cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+e.pgURL, "CDC_ROUTER_AMQP_URL="+amqpURL,
		"CDC_ROUTER_SLOT="+e.slot, "CDC_ROUTER_EXCHANGE="+e.exchange)
	r.cmd.Stderr, r.cmd.Stdout = r, r
	if err := r.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { r.cmd.Wait(); r.exitAt = time.Now(); close(r.done) }()
	e.t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
		if strings.Contains(r.Output(), "WARNING: DATA RACE") {
			e.t.Errorf("the router reported a data race:\n%s", tail(r.Output()[strings.Index(r.Output(), "WARNING: DATA RACE"):], 60))
		}
		if e.t.Failed() {
			e.t.Logf("router output:\n%s", tail(r.Output(), 60))
		}
	})
	return r
}

// wait waits for the process to exit and returns its exit code (-1 if it was killed by a signal).
func (r *router) wait(timeout time.Duration) int {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(timeout):
		r.t.Fatalf("router did not exit within %v; output:\n%s", timeout, tail(r.Output(), 40))
	}
	return r.cmd.ProcessState.ExitCode()
}

func (r *router) signal(sig syscall.Signal) { r.cmd.Process.Signal(sig) }

// waitLog waits until the router's output contains s.
func (r *router) waitLog(s string, timeout time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(timeout)
	for !strings.Contains(r.Output(), s) {
		if time.Now().After(deadline) {
			r.t.Fatalf("router output has no %q after %v:\n%s", s, timeout, tail(r.Output(), 40))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func tail(s string, lines int) string {
	parts := strings.Split(s, "\n")
	if len(parts) > lines {
		parts = parts[len(parts)-lines:]
	}
	return strings.Join(parts, "\n")
}

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
