package record

import (
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// KindConsumerLost marks the harness's own consumer losing its channel or connection (the broker is shared
// and busy): it reconnects at once, and the messages it had not acknowledged come again (duplicates).
const KindConsumerLost gen.Kind = "consumer-lost"

// Consume receives from queue at url, straight from the broker, records each delivery into rec and then
// acknowledges it, and subscribes again whenever it loses its channel. It returns a function that stops it.
func Consume(url, queue string, rec *Recorder) (func(), error) {
	stop := make(chan struct{})
	done := make(chan struct{})
	c, msgs, closed, err := subscribe(url, queue)
	if err != nil {
		return nil, err
	}
	go func() {
		defer close(done)
		for {
			reason := receive(rec, msgs, closed, stop)
			c.Close()
			select {
			case <-stop:
				return
			default:
			}
			rec.Event(check.Event{From: time.Now(), To: time.Now(), Kind: KindConsumerLost, Note: reason})
			for {
				if c, msgs, closed, err = subscribe(url, queue); err == nil {
					break
				}
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
		}
	}()
	return func() { close(stop); <-done }, nil
}

func subscribe(url, queue string) (*amqp.Connection, <-chan amqp.Delivery, <-chan *amqp.Error, error) {
	c, err := amqp.Dial(url)
	if err != nil {
		return nil, nil, nil, err
	}
	ch, err := c.Channel()
	if err == nil {
		err = ch.Qos(500, 0, false)
	}
	var msgs <-chan amqp.Delivery
	if err == nil {
		msgs, err = ch.Consume(queue, "", false, false, false, false, nil)
	}
	if err != nil {
		c.Close()
		return nil, nil, nil, fmt.Errorf("consume %s: %w", queue, err)
	}
	return c, msgs, ch.NotifyClose(make(chan *amqp.Error, 1)), nil
}

// receive records deliveries until msgs closes (it returns why, as far as it knows) or stop is closed.
func receive(rec *Recorder, msgs <-chan amqp.Delivery, closed <-chan *amqp.Error, stop <-chan struct{}) string {
	for {
		select {
		case <-stop:
			return "stopped"
		case m, ok := <-msgs:
			if !ok {
				select {
				case e := <-closed:
					if e != nil {
						return e.Error()
					}
				case <-time.After(100 * time.Millisecond):
				}
				return "the delivery channel closed"
			}
			at, _ := m.Headers["aggregate_type"].(string)
			ai, _ := m.Headers["aggregate_id"].(string)
			v, _ := m.Headers["aggregate_version"].(int64)
			bf, _ := m.Headers["x-backfill"].(bool)
			lsn, _ := m.Headers["commit_lsn"].(string)
			replayed, _ := m.Headers["x-replayed"].(bool)
			rec.Delivery(check.Delivery{At: time.Now(), MessageID: m.MessageId, Aggregate: at + "/" + ai, Version: v,
				Backfill: bf, CommitLSN: lsn, Redelivered: m.Redelivered, Replayed: replayed})
			m.Ack(false)
		}
	}
}
