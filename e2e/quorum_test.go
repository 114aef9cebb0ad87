package e2e

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestQuorumQueueConsumerGetsEveryEvent: consumers on quorum queues (what RabbitMQ 4 offers for HA, now
// that mirrored classic queues are gone), with the router's own unroutable queue a quorum queue too: every
// event arrives, first deliveries in order, and the unroutable queue is declared as quorum.
func TestQuorumQueueConsumerGetsEveryEvent(t *testing.T) {
	e := newEnv(t)
	ch := e.channel()
	args := amqp.Table{"alternate-exchange": e.exchange + ".unroutable"}
	if err := ch.ExchangeDeclare(e.exchange, "topic", true, false, false, false, args); err != nil {
		t.Fatalf("declare exchange: %v", err)
	}
	if _, err := ch.QueueDeclare(e.queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("declare quorum queue: %v", err)
	}
	if err := ch.QueueBind(e.queue, "#", e.exchange, false, nil); err != nil {
		t.Fatalf("bind: %v", err)
	}
	c, w := e.consume(e.queue), newWriter(t, e.pgURL, 20)
	e.startStreaming("--unroutable-queue-type", "quorum")
	w.write(1000, 20, 0)
	expectEveryEventInOrder(t, c, w, "quorum queue", 60*time.Second)
	if _, err := ch.QueueDeclare(e.exchange+".unroutable", true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		t.Fatalf("the unroutable queue is not a quorum queue: %v", err)
	}
}

// TestUnroutableQueueOfTheOtherTypeIsRefused: a router asked for a quorum unroutable queue where a classic
// one exists (an earlier run with the default) refuses at once, naming both ways out.
func TestUnroutableQueueOfTheOtherTypeIsRefused(t *testing.T) {
	e := newStreamEnv(t)
	ch := e.channel()
	if _, err := ch.QueueDeclare(e.exchange+".unroutable", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	r := e.start("", "--unroutable-queue-type", "quorum")
	code := r.wait(30 * time.Second)
	for _, want := range []string{"--unroutable-queue-type classic to keep it", "rabbitmqctl delete_queue " + e.exchange + ".unroutable"} {
		if code == 0 || !strings.Contains(r.Output(), want) {
			t.Fatalf("exit %d, output:\n%s\nwant a non-zero exit with %q", code, tail(r.Output(), 10), want)
		}
	}
	t.Logf("refused: %s", tail(strings.TrimSpace(r.Output()), 1))
}
