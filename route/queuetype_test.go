package route

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestAlternateQueueTypeQuorum: with AlternateQueueType quorum the alternate exchange's queue is a quorum
// queue (a redeclare as quorum succeeds; one as classic would be refused), and an unknown type is refused.
func TestAlternateQueueTypeQuorum(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.AlternateQueueType = QueueQuorum
	b.dial(cfg)
	ae := b.exchange + UnroutableSuffix
	if _, err := b.admin.QueueDeclare(ae, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("the alternate queue is not a quorum queue: %v", err)
	}
	cfg.AlternateQueueType = "stream"
	if err := cfg.Validate(); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "choose classic or quorum") {
		t.Errorf("Validate(stream) = %v, want the choice named", err)
	}
}
