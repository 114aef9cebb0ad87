package e2e

import (
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestMigrateDeclaresTheTopologyForConsumers: `migrate --amqp-url` declares the exchange exactly as `run`
// does, so a consumer binds before the first run and receives the initial snapshot; run accepts the
// declaration (no 406 for other arguments).
func TestMigrateDeclaresTheTopologyForConsumers(t *testing.T) {
	e := newEnv(t)
	w := newWriter(t, e.pgURL, 5)
	w.prefill(50, "")
	out, code := e.cli("migrate", "--amqp-url", e.amqpURL, "--exchange", e.exchange)
	if code != 0 || !strings.Contains(out, "declared: exchange "+e.exchange) {
		t.Fatalf("migrate --amqp-url: exit %d\n%s", code, out)
	}
	ch := e.channel()
	if err := ch.ExchangeDeclarePassive(e.exchange, amqp.ExchangeTopic, true, false, false, false, nil); err != nil {
		t.Fatalf("the exchange does not exist after migrate: %v", err)
	}
	ch = e.channel()
	if _, err := ch.QueueDeclare(e.queue, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(e.queue, "#", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	c := e.consume(e.queue)
	r := e.startStreaming()
	c.waitFor(t, w.rows, 30*time.Second)
	if strings.Contains(r.Output(), "unroutable_gained") {
		t.Errorf("the router reports unroutable events although a queue was bound:\n%s", tail(r.Output(), 10))
	}
}

// TestSnapshotIntoNothingSaysSo: an initial snapshot published before any queue is bound parks its events
// in the unroutable queue; the router says how many, instead of nothing.
func TestSnapshotIntoNothingSaysSo(t *testing.T) {
	e := newEnv(t)
	w := newWriter(t, e.pgURL, 5)
	w.prefill(30, "")
	r := e.startStreaming()
	r.waitLog("unroutable_gained=30", 10*time.Second)
}
