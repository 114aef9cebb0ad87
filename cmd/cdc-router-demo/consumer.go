package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// consume binds a durable queue to the router's exchange with '#' and prints one line per delivery until
// ctx ends or, once the writer of this process has stopped, every event it wrote has arrived (or --drain
// has passed). It never declares the exchange: it waits until the router has, so that the exchange's
// arguments are the router's. ready is closed once the queue is bound.
func consume(ctx context.Context, cfg config, t *tally, ready chan<- struct{}, out, log io.Writer) error {
	waiting, stopWaiting := context.WithCancel(ctx) // the wait also ends when the writer gives up
	go func() {
		select {
		case <-t.done:
			stopWaiting()
		case <-waiting.Done():
		}
	}()
	conn, ch, err := awaitExchange(waiting, cfg, log)
	stopWaiting()
	if err != nil || conn == nil {
		return err
	}
	defer conn.Close()
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	if _, err := ch.QueueDeclare(cfg.queue, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare queue %s: %w", cfg.queue, err)
	}
	if cfg.deleteQueue {
		defer func() {
			if _, err := ch.QueueDelete(cfg.queue, false, false, false); err != nil {
				fmt.Fprintf(log, "demo: delete queue %s: %v\n", cfg.queue, err)
			}
		}()
	}
	if err := ch.QueueBind(cfg.queue, "#", cfg.exchange, false, nil); err != nil {
		return fmt.Errorf("bind queue %s to exchange %s: %w", cfg.queue, cfg.exchange, err)
	}
	if err := ch.Qos(100, 0, false); err != nil {
		return fmt.Errorf("set prefetch: %w", err)
	}
	deliveries, err := ch.Consume(cfg.queue, "cdc-router-demo", false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume from %s: %w", cfg.queue, err)
	}
	fmt.Fprintf(log, "demo: queue %s bound to exchange %s with '#', waiting for events\n", cfg.queue, cfg.exchange)
	close(ready)
	writerDone := t.done
	var drain <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-closed:
			return fmt.Errorf("RabbitMQ closed the connection: %v", err)
		case <-writerDone:
			writerDone = nil
			if t.settled() {
				return nil
			}
			drain = time.After(cfg.drain)
		case <-drain:
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("RabbitMQ ended the consumer on queue %s (deleted?)", cfg.queue)
			}
			printEvent(out, d)
			if err := d.Ack(false); err != nil {
				return fmt.Errorf("ack: %w", err)
			}
			t.arrived(d.MessageId)
			if t.done != nil && writerDone == nil && t.settled() {
				return nil
			}
		}
	}
}

func printEvent(out io.Writer, d amqp.Delivery) {
	h := func(key string) any {
		if v, ok := d.Headers[key]; ok {
			return v
		}
		return "-"
	}
	fmt.Fprintf(out, "event %s id=%s aggregate=%v v%v lsn=%v traceparent=%v payload=%s\n", d.RoutingKey, d.MessageId,
		h("aggregate_id"), h("aggregate_version"), h("commit_lsn"), h("traceparent"), d.Body)
}

// awaitExchange connects and waits until the exchange exists (the router declares it when it starts). It
// returns a nil connection when ctx ends first. Wrong credentials or vhost end the wait with an error.
func awaitExchange(ctx context.Context, cfg config, log io.Writer) (*amqp.Connection, *amqp.Channel, error) {
	var conn *amqp.Connection
	for i := 0; ; i++ {
		var err error
		if conn == nil || conn.IsClosed() {
			conn, err = amqp.DialConfig(cfg.amqpURL, amqp.Config{Properties: amqp.Table{"connection_name": "cdc-router-demo"}})
			if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrSASL) || errors.Is(err, amqp.ErrVhost) {
				return nil, nil, fmt.Errorf("connect to RabbitMQ (--amqp-url): %w", err)
			}
			if err != nil && i%30 == 0 {
				fmt.Fprintf(log, "demo: waiting for RabbitMQ: %v\n", err)
			}
		}
		if err == nil {
			var ch *amqp.Channel
			if ch, err = conn.Channel(); err == nil {
				if err = ch.ExchangeDeclarePassive(cfg.exchange, amqp.ExchangeTopic, true, false, false, false, nil); err == nil {
					return conn, ch, nil
				}
			}
			var aerr *amqp.Error
			if !errors.As(err, &aerr) || aerr.Code != amqp.NotFound {
				conn.Close()
				return nil, nil, fmt.Errorf("look up exchange %s: %w", cfg.exchange, err)
			}
			if i%30 == 0 {
				fmt.Fprintf(log, "demo: waiting for exchange %s: `cdc-router run` declares it when it starts\n", cfg.exchange)
			}
		}
		select {
		case <-ctx.Done():
			if conn != nil {
				conn.Close()
			}
			return nil, nil, nil
		case <-time.After(time.Second):
		}
	}
}
