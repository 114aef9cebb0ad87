package inbox

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ErrChannelClosed is returned by Consume when the broker or the network closed the channel or the
// connection under it. Dial again and call Consume on a new channel; unacknowledged deliveries are
// redelivered.
var ErrChannelClosed = errors.New("AMQP channel closed")

// Consume reads the queue on ch with manual acknowledgements and prefetch Config.Prefetch, and
// processes one delivery at a time:
//   - an outcome whose Ack is true (Applied, Duplicate, Stale, Parked, Conflict, Failed) is acknowledged
//     after its transaction committed, never before;
//   - a malformed message is recorded in the failed table and acknowledged;
//   - a Gap outcome or any error (serialization failure, deadlock, lock timeout, lost database
//     connection, a handler error not marked Permanent) is requeued with basic.nack after an exponential
//     backoff with jitter, based on the event's durable count of failed attempts (FailedAttempts) or, for
//     a failure not counted, on this channel's run of such failures; an event whose failure reaches
//     Config.MaxAttempts is recorded in the failed table and acknowledged (the Failed outcome).
//
// The backoff sleeps while holding the channel's other prefetched deliveries; the runner does not.
//
// Consume returns nil when ctx is cancelled: it cancels the consumer, requeues the deliveries it holds,
// and returns. It returns ErrChannelClosed when the channel goes away. Give each Consume its own channel;
// run several for parallelism (the inbox orders events per aggregate, whatever the delivery order).
func (p *Processor) Consume(ctx context.Context, ch *amqp.Channel, queue string) error {
	if err := ch.Qos(p.cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("set prefetch on %s: %w", queue, err)
	}
	tag := "inbox-" + rand.Text()
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	p.log.Info("inbox consumer started", "queue", queue, "consumer_tag", tag, "prefetch", p.cfg.Prefetch)
	uncounted := 0
	for {
		select {
		case <-ctx.Done():
			p.stop(ch, queue, tag, deliveries)
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("consume %s: %w", queue, ErrChannelClosed)
			}
			if err := p.deliver(ctx, d, &uncounted); err != nil {
				return fmt.Errorf("consume %s: %w: %w", queue, ErrChannelClosed, err)
			}
		}
	}
}

// deliver processes one delivery and acknowledges or requeues it. uncounted is the channel's run of
// failures that counted no attempt (Gap, contention). It returns an error only when the acknowledgement
// itself fails, which means the channel is gone.
func (p *Processor) deliver(ctx context.Context, d amqp.Delivery, uncounted *int) error {
	ev, err := DecodeDelivery(d)
	var res Result
	if err != nil {
		res, err = p.fail(ctx, ev, reasonMalformed, err)
	} else {
		res, err = p.Process(ctx, ev)
	}
	if err == nil && res.Outcome.Ack() {
		*uncounted = 0
		return d.Ack(false)
	}
	n := FailedAttempts(err)
	if n == 0 {
		*uncounted++
		n = *uncounted
	}
	wait := backoff(n, p.cfg.RetryMin, p.cfg.RetryMax)
	switch {
	case ctx.Err() != nil:
		wait = 0
	case err == nil:
		p.log.Debug("inbox event ahead of a gap, requeued", "event_id", ev.ID, "delay", wait)
	case IsTransient(err):
		p.log.Warn("inbox delivery failed, requeued", "event_id", ev.ID, "delay", wait, "error", err)
	default:
		p.log.Error("inbox delivery failed, requeued", "event_id", ev.ID, "delay", wait, "error", err)
	}
	sleep(ctx, wait)
	return d.Nack(false, true)
}

// stop cancels the consumer and requeues every delivery the client already holds, including those the
// client library may drop after the cancel.
func (p *Processor) stop(ch *amqp.Channel, queue, tag string, deliveries <-chan amqp.Delivery) {
	if err := ch.Cancel(tag, false); err != nil {
		p.log.Warn("inbox consumer cancel failed", "queue", queue, "error", err)
		return
	}
	for d := range deliveries {
		_ = d.Nack(false, true) // the multiple nack below covers a failure
	}
	// Delivery tag 0 with multiple set is "every outstanding delivery on this channel".
	if err := ch.Nack(0, true, true); err != nil {
		p.log.Warn("inbox requeue on stop failed", "queue", queue, "error", err)
	}
	p.log.Info("inbox consumer stopped", "queue", queue, "consumer_tag", tag)
}
