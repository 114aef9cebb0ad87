package chaos

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// consume receives from the world's queue, straight from the broker, and records each delivery. It
// returns a function that stops it; a consumer that loses its connection is an error of the harness.
func (w *world) consume() (func(), error) {
	c, err := amqp.Dial(w.amqpURL)
	if err != nil {
		return nil, err
	}
	ch, err := c.Channel()
	if err != nil {
		c.Close()
		return nil, err
	}
	if err := ch.Qos(1000, 0, false); err != nil {
		c.Close()
		return nil, err
	}
	msgs, err := ch.Consume(w.queue, "", true, false, false, false, nil)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("consume %s: %w", w.queue, err)
	}
	stopped := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m := range msgs {
			at, _ := m.Headers["aggregate_type"].(string)
			ai, _ := m.Headers["aggregate_id"].(string)
			v, _ := m.Headers["aggregate_version"].(int64)
			bf, _ := m.Headers["x-backfill"].(bool)
			w.rec.delivery(Delivery{At: time.Now(), MessageID: m.MessageId, Aggregate: at + "/" + ai, Version: v,
				Backfill: bf, Redelivered: m.Redelivered})
		}
		select {
		case <-stopped:
		default:
			w.t.Errorf("the harness's consumer lost its connection to the broker: deliveries after %v are not recorded", time.Now().Format(time.TimeOnly))
		}
	}()
	return func() { close(stopped); c.Close(); <-done }, nil
}
