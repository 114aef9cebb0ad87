package runner

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
)

// ErrChannelClosed is returned by Consume when the broker or the network closed the channel or the
// connection under it. Dial again and call Consume on a new channel; unacknowledged deliveries are
// redelivered.
var ErrChannelClosed = errors.New("AMQP channel closed")

// Consume reads the queue on ch with manual acknowledgements and prefetch inbox.Config.Prefetch, and
// processes one delivery at a time:
//   - an outcome whose Ack is true (Applied, Duplicate, Stale, Parked, Conflict, Failed) is acknowledged
//     after its transaction committed, never before;
//   - a malformed message is recorded in the failed table and acknowledged;
//   - a Gap outcome or any error (serialization failure, deadlock, lock timeout, lost database
//     connection, a handler error not marked Permanent) is requeued with basic.nack after an exponential
//     backoff with jitter, based on the event's durable count of failed attempts (FailedAttempts) or, for
//     a failure not counted, on this channel's run of such failures; an event whose failure reaches
//     inbox.Config.MaxAttempts is recorded in the failed table and acknowledged (the Failed outcome).
//
// The backoff sleeps while holding the channel's other prefetched deliveries; the runner does not.
//
// Consume returns nil when ctx is cancelled: it cancels the consumer, requeues the deliveries it holds,
// and returns. It returns ErrChannelClosed when the channel goes away. Give each Consume its own channel;
// run several for parallelism (the inbox orders events per aggregate, whatever the delivery order).
func Consume(ctx context.Context, p *inbox.Processor, ch *amqp.Channel, queue string) error {
	cfg, log := p.Config(), p.Logger()
	if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
		return fmt.Errorf("set prefetch on %s: %w", queue, err)
	}
	tag := "inbox-" + rand.Text()
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume %s: %w", queue, err)
	}
	log.Info("inbox consumer started", "queue", queue, "consumer_tag", tag, "prefetch", cfg.Prefetch)
	uncounted := 0
	for {
		select {
		case <-ctx.Done():
			stop(log, ch, queue, tag, deliveries)
			return nil
		case d, ok := <-deliveries:
			if !ok {
				return fmt.Errorf("consume %s: %w", queue, ErrChannelClosed)
			}
			if err := deliver(ctx, p, d, &uncounted); err != nil {
				return fmt.Errorf("consume %s: %w: %w", queue, ErrChannelClosed, err)
			}
		}
	}
}

// deliver processes one delivery and acknowledges or requeues it. uncounted is the channel's run of
// failures that counted no attempt (Gap, contention). It returns an error only when the acknowledgement
// itself fails, which means the channel is gone.
func deliver(ctx context.Context, p *inbox.Processor, d amqp.Delivery, uncounted *int) error {
	cfg, log := p.Config(), p.Logger()
	ev, err := DecodeDelivery(d)
	var res inbox.Result
	if err != nil {
		res, err = p.RecordMalformed(ctx, ev, err)
	} else {
		res, err = p.Process(ctx, ev)
	}
	if err == nil && res.Outcome.Ack() {
		*uncounted = 0
		return d.Ack(false)
	}
	n := inbox.FailedAttempts(err)
	if n == 0 {
		*uncounted++
		n = *uncounted
	}
	wait := backoff(n, cfg.RetryMin, cfg.RetryMax)
	switch {
	case ctx.Err() != nil:
		wait = 0
	case err == nil:
		log.Debug("inbox event ahead of a gap, requeued", "event_id", ev.ID, "delay", wait)
	case inbox.IsTransient(err):
		log.Warn("inbox delivery failed, requeued", "event_id", ev.ID, "delay", wait, "error", err)
	default:
		log.Error("inbox delivery failed, requeued", "event_id", ev.ID, "delay", wait, "error", err)
	}
	sleep(ctx, wait)
	return d.Nack(false, true)
}

// stop cancels the consumer and requeues every delivery the client already holds, including those the
// client library may drop after the cancel.
func stop(log *slog.Logger, ch *amqp.Channel, queue, tag string, deliveries <-chan amqp.Delivery) {
	if err := ch.Cancel(tag, false); err != nil {
		log.Warn("inbox consumer cancel failed", "queue", queue, "error", err)
		return
	}
	for d := range deliveries {
		_ = d.Nack(false, true) // the multiple nack below covers a failure
	}
	// Delivery tag 0 with multiple set is "every outstanding delivery on this channel".
	if err := ch.Nack(0, true, true); err != nil {
		log.Warn("inbox requeue on stop failed", "queue", queue, "error", err)
	}
	log.Info("inbox consumer stopped", "queue", queue, "consumer_tag", tag)
}
