package runner_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// runnerLab is a lab whose events a Runner consumes: the runner's own durable queue (declared and bound
// already) on the lab's exchange (the lab's queue is unbound, so it gets no copies), a pool for the Processor, a registry for
// the metrics and a captured log.
type runnerLab struct {
	*lab
	queue    string // the runner's
	consumer string
	pool     *pgxpool.Pool
	reg      *prometheus.Registry
	logs     *syncBuffer

	// wrap, when set, runs around the lab's projection handler.
	wrap func(ctx context.Context, tx pgx.Tx, ev inbox.Event, next inbox.Handler) error
}

func newRunnerLab(t *testing.T) *runnerLab {
	t.Helper()
	l := &runnerLab{lab: newLab(t), consumer: "runner-" + testenv.Name(t)[2:], reg: prometheus.NewRegistry(),
		logs: &syncBuffer{}}
	if len(l.consumer) > 63 {
		l.consumer = l.consumer[:63]
	}
	if err := l.Pub.QueueUnbind(l.lab.Queue, "order.#", l.Exchange, nil); err != nil {
		t.Fatalf("unbind the lab's queue: %v", err)
	}
	pc, err := pgxpool.ParseConfig(l.URL)
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	pc.MaxConns = 16 // above the most workers a test runs
	if l.pool, err = pgxpool.NewWithConfig(l.Ctx, pc); err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(l.pool.Close)
	l.queue = testenv.Name(t)
	t.Cleanup(func() { deleteQueue(t, l.queue) })
	// Declared as the runner declares it, so that events published before the runner starts wait in it.
	if _, err := l.Pub.QueueDeclare(l.queue, true, false, false, false, nil); err != nil {
		t.Fatalf("declare queue: %v", err)
	}
	if err := l.Pub.QueueBind(l.queue, "order.#", l.Exchange, false, nil); err != nil {
		t.Fatalf("bind queue: %v", err)
	}
	return l
}

// deleteQueue removes a queue on a connection of its own (the test may have broken the others).
func deleteQueue(t *testing.T, queue string) {
	c, err := amqp.Dial(testenv.AMQPURL(t))
	if err != nil {
		return
	}
	defer c.Close()
	if ch, err := c.Channel(); err == nil {
		ch.QueueDelete(queue, false, false, false)
	}
}

// processor is a Processor over the pool with the lab's projection handler (wrapped by wrap).
func (l *runnerLab) processor(cfg inbox.Config) *inbox.Processor {
	l.T.Helper()
	cfg.Consumer = l.consumer
	handler := func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		if l.wrap != nil {
			return l.wrap(ctx, tx, ev, l.Handle)
		}
		return l.Handle(ctx, tx, ev)
	}
	p, err := inbox.New(l.pool, handler, cfg, l.logger())
	if err != nil {
		l.T.Fatal(err)
	}
	return p
}

func (l *runnerLab) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// config is the runner configuration of the lab: its broker, exchange, queue and registry, short
// backoffs.
func (l *runnerLab) config(workers int) runner.Config {
	return runner.Config{URLs: []string{testenv.AMQPURL(l.T)}, Exchange: l.Exchange, Queue: l.queue,
		Bindings: []string{"order.#"}, Workers: workers, RetryMin: 20 * time.Millisecond,
		RetryMax: 200 * time.Millisecond, ReconnectMin: 50 * time.Millisecond, ReconnectMax: time.Second,
		Registerer: l.reg}
}

// start runs a Runner until the returned stop is called; stop returns Run's error. The test fails if
// the runner is still running at its end.
func (l *runnerLab) start(p *inbox.Processor, cfg runner.Config) (stop func() error) {
	l.T.Helper()
	r, err := runner.New(p, cfg, l.logger())
	if err != nil {
		l.T.Fatal(err)
	}
	ctx, cancel := context.WithCancel(l.Ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(time.Minute):
				l.T.Fatal("runner did not stop within a minute")
			}
		})
		return runErr
	}
	l.T.Cleanup(func() { stop() })
	return stop
}

// publishAll publishes the events in order with the AMQP timestamp of now, and waits for every confirm.
func (l *runnerLab) publishAll(events []inbox.Event) {
	l.T.Helper()
	l.publishTo(l.Exchange, events)
}

// publishTo is publishAll to another exchange.
func (l *runnerLab) publishTo(exchange string, events []inbox.Event) {
	l.T.Helper()
	ctx, cancel := context.WithTimeout(l.Ctx, time.Minute)
	defer cancel()
	var confirms []*amqp.DeferredConfirmation
	for _, ev := range events {
		headers := amqp.Table{"aggregate_type": ev.AggregateType, "aggregate_id": ev.AggregateID,
			"aggregate_version": ev.AggregateVersion, "schema_version": ev.SchemaVersion}
		dc, err := l.Pub.PublishWithDeferredConfirmWithContext(ctx, exchange, ev.AggregateType+"."+ev.Type, true, false,
			amqp.Publishing{MessageId: ev.ID, Type: ev.Type, ContentType: "application/json", Body: ev.Payload,
				Headers: headers, DeliveryMode: amqp.Persistent, Timestamp: time.Now()})
		if err != nil {
			l.T.Fatalf("publish %s: %v", ev.ID, err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			l.T.Fatalf("publish: confirm ack=%v err=%v", ok, err)
		}
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func (l *runnerLab) waitFor(what string, timeout time.Duration, cond func() bool) {
	l.T.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			l.T.Fatalf("%s: not within %v; log:\n%s", what, timeout, l.logs.tail(4000))
		}
	}
}

// queueMessages is the number of ready messages in the runner's queue.
func (l *runnerLab) queueMessages() int {
	l.T.Helper()
	ch := l.Channel()
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(l.queue, true, false, false, false, nil)
	if err != nil {
		l.T.Fatalf("inspect queue: %v", err)
	}
	return q.Messages
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct{ testenv.Buffer }

func (b *syncBuffer) contains(s string) bool { return strings.Contains(b.String(), s) }

// tail is the end of the log, at most n bytes.
func (b *syncBuffer) tail(n int) string {
	s := b.String()
	if len(s) > n {
		s = "..." + s[len(s)-n:]
	}
	return s
}

// orderStream is versions 1..versions of each of aggregates orders, interleaved at random across
// aggregates but in version order within each (as the router publishes them), with every dupEvery-th
// event published once more later. It returns the messages and the distinct events.
func orderStream(seed uint64, aggregates, versions, dupEvery int) (msgs, events []inbox.Event) {
	rng := rand.New(rand.NewPCG(seed, seed))
	next := make([]int64, aggregates)
	left := aggregates * versions
	for left > 0 {
		a := rng.IntN(aggregates)
		if next[a] == int64(versions) {
			continue
		}
		next[a]++
		left--
		ev := order(fmt.Sprintf("order-%d", a), next[a], int64(a)+next[a])
		events = append(events, ev)
		msgs = append(msgs, ev)
		if dupEvery > 0 && len(events)%dupEvery == 0 {
			// A copy of a random earlier event, published after it: a redelivered duplicate.
			msgs = append(msgs, events[rng.IntN(len(events))])
		}
	}
	return msgs, events
}
