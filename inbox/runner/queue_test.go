package runner_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

func TestRunnerConfigQueueArguments(t *testing.T) {
	ok := runner.Config{URLs: []string{"amqp://localhost/"}, Queue: "q", Bindings: []string{"#"}}
	for _, tc := range []struct {
		name   string
		change func(*runner.Config)
		err    string // empty: valid
	}{
		{"quorum with every argument", func(c *runner.Config) {
			c.QueueType, c.SingleActiveConsumer, c.DeliveryLimit = "quorum", true, 5
			c.DeadLetterExchange, c.DeadLetterRoutingKey = "dlx", "dead"
			c.QueueArguments = amqp.Table{"x-max-length": int64(1000)}
		}, ""},
		{"classic single active consumer", func(c *runner.Config) { c.SingleActiveConsumer = true }, ""},
		{"stream", func(c *runner.Config) { c.QueueType = "stream" }, `QueueType "stream" is not`},
		{"quorum and classic", func(c *runner.Config) { c.Quorum, c.QueueType = true, "classic" }, "set one of them"},
		{"delivery limit on classic", func(c *runner.Config) { c.DeliveryLimit = 3 }, "DeliveryLimit needs a quorum queue"},
		{"negative delivery limit", func(c *runner.Config) { c.Quorum, c.DeliveryLimit = true, -1 }, "DeliveryLimit -1"},
		{"routing key alone", func(c *runner.Config) { c.DeadLetterRoutingKey = "k" }, "without DeadLetterExchange"},
		{"typed argument in the map", func(c *runner.Config) {
			c.QueueArguments = amqp.Table{"x-single-active-consumer": true}
		}, "use runner.Config.SingleActiveConsumer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			err := c.Defaults().Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Validate: %v, want an error containing %q", err, tc.err)
			}
		})
	}
}

// runUntilRefused runs a runner with cfg and returns Run's error, failing the test if it keeps retrying.
func runUntilRefused(t *testing.T, l *runnerLab, cfg runner.Config) error {
	t.Helper()
	r, err := runner.New(l.processor(inbox.Config{}), cfg, l.logger())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(l.Ctx) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run kept retrying a setup the broker refuses")
	}
	return err
}

// A queue that exists with other arguments than the runner's is refused with the argument RabbitMQ
// names, the runner.Config field that declares it, and the way to change it (arguments cannot change in
// place), never the old advice about Quorum: both when the runner adds an argument the queue lacks and
// when the queue has one the runner does not declare.
func TestRunnerNamesTheMismatchedQueueArgument(t *testing.T) {
	l := newRunnerLab(t) // its queue: classic, no arguments
	cfg := l.config(1)
	cfg.Registerer = nil
	cfg.SingleActiveConsumer = true
	err := runUntilRefused(t, l, cfg)
	for _, s := range []string{"406", "inequivalent arg 'x-single-active-consumer'",
		"set runner.Config.SingleActiveConsumer to the queue's current value", "drain the queue, delete it",
		"cannot change a queue's arguments in place"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Run: %v, want it to say %q", err, s)
		}
	}
	if err != nil && strings.Contains(err.Error(), "Quorum match") {
		t.Errorf("Run: %v: the old, wrong advice", err)
	}

	other := testenv.Name(t) + "_dlx"
	t.Cleanup(func() { deleteQueue(t, other) })
	if _, err := l.Channel().QueueDeclare(other, true, false, false, false,
		amqp.Table{"x-dead-letter-exchange": "somewhere"}); err != nil {
		t.Fatal(err)
	}
	cfg = l.config(1)
	cfg.Registerer, cfg.Queue = nil, other
	err = runUntilRefused(t, l, cfg)
	if err == nil || !strings.Contains(err.Error(), "inequivalent arg 'x-dead-letter-exchange'") ||
		!strings.Contains(err.Error(), "set runner.Config.DeadLetterExchange") {
		t.Errorf("Run on a queue with a dead-letter exchange the runner does not declare: %v", err)
	}
	summary(t, "Run: %v", err)
}

// Two runners of one projection on a quorum queue with x-single-active-consumer (and a delivery limit
// and dead-letter exchange): the broker delivers to one of them only, nothing parks, and when the
// active one stops the other takes over and applies the rest in order. The queue carries exactly the
// declared arguments. Run it on RabbitMQ 4.0 with env $(internal/testenv/rabbitmq4.sh start).
func TestRunnerSingleActiveConsumer(t *testing.T) {
	l := newRunnerLab(t)
	queue := testenv.Name(t) + "_sac"
	t.Cleanup(func() { deleteQueue(t, queue) })
	var mu sync.Mutex
	received := map[int]int{} // per runner
	parked := 0
	cfgFor := func(n int) runner.Config {
		cfg := l.config(4)
		cfg.Registerer, cfg.Queue = nil, queue
		cfg.Quorum, cfg.SingleActiveConsumer, cfg.DeliveryLimit = true, true, 50
		cfg.DeadLetterExchange = queue + "_dead"
		cfg.OnOutcome = func(ev inbox.Event, res inbox.Result, err error) {
			mu.Lock()
			defer mu.Unlock()
			received[n]++
			if res.Outcome == inbox.Parked {
				parked++
			}
		}
		return cfg
	}
	stop1 := l.start(l.processor(inbox.Config{}), cfgFor(1))
	l.waitFor("the first runner consumes", 20*time.Second, func() bool { return l.logs.contains("inbox runner consuming") })
	stop2 := l.start(l.processor(inbox.Config{}), cfgFor(2))
	l.waitFor("the second runner consumes", 20*time.Second, func() bool {
		return strings.Count(l.logs.String(), "inbox runner consuming") == 2
	})

	msgs, events := orderStream(7, 20, 20, 0)
	first, rest := msgs[:200], msgs[200:]
	l.publishAll(first)
	l.waitFor("the first half applied", time.Minute, func() bool {
		return l.Count(`SELECT count(*) FROM applied_log`) == int64(len(first))
	})
	mu.Lock()
	active, idle := 1, 2
	if received[2] > 0 {
		active, idle = 2, 1
	}
	if received[idle] != 0 {
		t.Errorf("both runners received deliveries (%v): the queue is not single active consumer", received)
	}
	mu.Unlock()
	stops := map[int]func() error{1: stop1, 2: stop2}
	if err := stops[active](); err != nil {
		t.Fatalf("stop the active runner: %v", err)
	}
	l.publishAll(rest)
	l.waitFor("the rest applied by the other runner", time.Minute, func() bool {
		return l.Count(`SELECT count(*) FROM applied_log`) == int64(len(events))
	})
	if err := stops[idle](); err != nil {
		t.Fatalf("stop the second runner: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if received[idle] == 0 {
		t.Errorf("the standby runner received nothing after the active one stopped: %v", received)
	}
	want(t, "events parked", parked, 0)
	want(t, "inbox rows", l.Count(`SELECT count(*) FROM inbox.inbox WHERE status = 'applied'`), int64(len(events)))

	ch := l.Channel()
	_, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum,
		"x-single-active-consumer": true, "x-delivery-limit": int64(50), "x-dead-letter-exchange": queue + "_dead"})
	if err != nil {
		t.Errorf("the queue does not carry the declared arguments: %v", err)
	}
	var amqpErr *amqp.Error
	_, err = l.Channel().QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum})
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
		t.Errorf("declaring it without single active consumer: %v, want 406", err)
	}
	summary(t, "%d events, deliveries per runner %v (runner %d active first), %d parked", len(events), received, active, parked)
}
