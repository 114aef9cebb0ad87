package route

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// queueType is the type RabbitMQ reports for queue name (rabbitmqctl list_queues name type).
func queueType(t testing.TB, name string) string {
	t.Helper()
	out, err := testenv.Rabbitmqctl(t, "list_queues", "-q", "--no-table-headers", "name", "type").CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl list_queues: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == name {
			return f[1]
		}
	}
	t.Fatalf("queue %s not listed by rabbitmqctl:\n%s", name, out)
	return ""
}

// TestUnroutableQueueType: the unroutable queue is declared with the configured type; a router configured
// for classic keeps working on a queue an earlier version declared without x-queue-type; a queue of the
// other type is a refusal that names both ways out.
func TestUnroutableQueueType(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, typ := range []string{QueueTypeClassic, QueueTypeQuorum} {
		b := newBroker(t)
		cfg := b.config("")
		cfg.UnroutableQueueType = typ
		r := b.dial(cfg)
		if got := queueType(t, b.exchange+UnroutableSuffix); got != typ {
			t.Errorf("--unroutable-queue-type %s declared a %s queue", typ, got)
		}
		if _, ok := r.UnroutableMessages(); !ok {
			t.Errorf("UnroutableMessages on a %s queue: not ok", typ)
		}
	}

	legacy := newBroker(t)
	if _, err := legacy.admin.QueueDeclare(legacy.exchange+UnroutableSuffix, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	legacy.dial(legacy.config("")) // fails the test on an error

	for _, tc := range []struct{ existing, configured string }{
		{QueueTypeQuorum, QueueTypeClassic},
		{QueueTypeClassic, QueueTypeQuorum},
	} {
		b := newBroker(t)
		q := b.exchange + UnroutableSuffix
		if _, err := b.admin.QueueDeclare(q, true, false, false, false, amqp.Table{"x-queue-type": tc.existing}); err != nil {
			t.Fatal(err)
		}
		cfg := b.config("")
		cfg.UnroutableQueueType = tc.configured
		_, err := Dial(ctx, cfg, nil)
		if !errors.Is(err, ErrExchangeMismatch) || !strings.Contains(err.Error(), "--unroutable-queue-type "+tc.existing+" to keep it") ||
			!strings.Contains(err.Error(), "rabbitmqctl delete_queue "+q) {
			t.Fatalf("Dial (%s) on a %s queue = %v, want ErrExchangeMismatch naming --unroutable-queue-type %s and delete_queue",
				tc.configured, tc.existing, err, tc.existing)
		}
		t.Logf("%s on %s: %v", tc.configured, tc.existing, err)
		if err := Declare(ctx, cfg); !errors.Is(err, ErrExchangeMismatch) {
			t.Fatalf("Declare (%s) on a %s queue = %v, want ErrExchangeMismatch", tc.configured, tc.existing, err)
		}
	}
}

// TestUnroutableQueueTypeUnknownIsRefused: a type other than classic or quorum is a configuration error
// that names the choice.
func TestUnroutableQueueTypeUnknownIsRefused(t *testing.T) {
	cfg := Config{URL: "amqp://h/", UnroutableQueueType: "stream"}
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "choose classic or quorum") {
		t.Errorf("Validate(stream) = %v, want the choice named", err)
	}
}
