package route

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestUnroutableQueueTypeQuorum: with UnroutableQueueType quorum the alternate exchange's queue is a quorum
// queue (a redeclare as quorum succeeds; one as classic would be refused), and an unknown type is refused.
func TestUnroutableQueueTypeQuorum(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.UnroutableQueueType = QueueTypeQuorum
	b.dial(cfg)
	ae := b.exchange + UnroutableSuffix
	if _, err := b.admin.QueueDeclare(ae, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("the alternate queue is not a quorum queue: %v", err)
	}
	cfg.UnroutableQueueType = "stream"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "choose classic or quorum") {
		t.Errorf("Validate(stream) = %v, want the choice named", err)
	}
}

// TestHomeNodeDownNamesTheQuorumQueue: a classic alternate queue whose cluster node is down makes every
// declaration fail with 404; the error says so, is retried (ErrUnreachable), and names the fix.
func TestHomeNodeDownNamesTheQuorumQueue(t *testing.T) {
	cfg := Config{URL: "amqp://h/"}.withDefaults()
	err := declareError(cfg, "u", "/", "queue", "outbox.unroutable", &amqp.Error{Code: amqp.NotFound,
		Reason: "NOT_FOUND - home node 'rabbit@n2' of durable queue 'outbox.unroutable' in vhost '/' is down or inaccessible"})
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("err = %v, want ErrUnreachable, so the router retries", err)
	}
	for _, want := range []string{"cluster node it lives on is down", "--unroutable-queue-type quorum", "rabbitmqadmin delete queue name=outbox.unroutable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
