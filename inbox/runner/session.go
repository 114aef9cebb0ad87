package runner

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// setupTimeout bounds the declarations and the start of consuming on a new connection: the client
// library's calls have no deadline of their own, and a broker that stops answering would hold them.
const setupTimeout = 30 * time.Second

// exchangePoll is how often a runner waiting for the router's exchange checks for it again.
const exchangePoll = 500 * time.Millisecond

// session is one connection and its consuming channel (or, for a partitioned group, its setup channel and
// one channel per partition it consumes). Deliveries keep a pointer to their feed: once it is dead their
// acknowledgement is void (the broker has requeued them), so the dispatcher drops those it has not started.
type session struct {
	conn     *amqp.Connection
	ch       *amqp.Channel
	tag      string
	chClosed chan *amqp.Error
	canceled chan string      // consumer tags the broker cancelled (queue deleted, its node down)
	closed   chan *amqp.Error // the connection's
	feed     *feed            // the queue's consumer (not a group)
	group    *groupState      // a partitioned group's member slot and partitions, nil otherwise
}

// connect dials, waits for the exchange, declares and binds the queue and starts consuming.
func (r *Runner) connect(ctx context.Context) (*session, error) {
	conn, err := r.dial()
	if err != nil {
		return nil, err
	}
	s := &session{conn: conn, closed: conn.NotifyClose(make(chan *amqp.Error, 1))}
	if err := r.waitExchange(ctx, conn); err != nil {
		s.close(r.log)
		return nil, err
	}
	// Closing the connection ends a call that hangs; its error is then the library's "closed".
	watchdog := time.AfterFunc(setupTimeout, func() { _ = conn.Close() })
	unwatch := context.AfterFunc(ctx, func() { _ = conn.Close() })
	if r.cfg.Partitions > 0 {
		err = r.setupGroup(s)
	} else {
		err = r.setup(s)
	}
	timedOut := !watchdog.Stop()
	unwatch()
	if err != nil {
		s.close(r.log)
		if timedOut {
			err = fmt.Errorf("set up the queue: no answer from the broker within %v: %w", setupTimeout, err)
		}
		return nil, err
	}
	return s, nil
}

// dial connects to the first URL that answers. The error names each URL without its password.
func (r *Runner) dial() (*amqp.Connection, error) {
	props := amqp.NewConnectionProperties()
	props["connection_name"] = r.cfg.ConnectionName
	var errs []error
	for _, url := range r.cfg.URLs {
		conn, err := amqp.DialConfig(url, amqp.Config{Properties: props})
		if err == nil {
			r.log.Info("inbox runner connected", "broker", redactURL(url))
			return conn, nil
		}
		if errors.Is(err, amqp.ErrCredentials) || errors.Is(err, amqp.ErrVhost) || errors.Is(err, amqp.ErrSASL) {
			err = fatal(err, "check the user, password and vhost in runner.Config.URLs and the user's permissions")
		}
		errs = append(errs, fmt.Errorf("dial %s: %w", redactURL(url), err))
	}
	return nil, errors.Join(errs...)
}

// waitExchange returns once the exchange exists. It only ever declares it passively: the router declares
// it, with arguments (alternate-exchange) that an exchange declared here would lack.
func (r *Runner) waitExchange(ctx context.Context, conn *amqp.Connection) error {
	var logged time.Time
	for {
		ch, err := conn.Channel()
		if err != nil {
			return fmt.Errorf("open channel: %w", err)
		}
		err = ch.ExchangeDeclarePassive(r.cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, nil)
		if err == nil {
			_ = ch.Close()
			return nil
		}
		var amqpErr *amqp.Error
		if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound {
			return setupError("check exchange "+r.cfg.Exchange, err, "")
		}
		if time.Since(logged) >= r.cfg.ExchangeWaitLog {
			r.log.Info("inbox runner waiting for cdc-router to declare the exchange", "exchange", r.cfg.Exchange)
			logged = time.Now()
		}
		sleep(ctx, exchangePoll)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// setup declares and binds the queue on a new channel and starts consuming on it.
func (r *Runner) setup(s *session) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	s.ch = ch
	s.chClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	s.canceled = ch.NotifyCancel(make(chan string, 1))
	q := r.cfg.Queue
	if _, err := ch.QueueDeclare(q, true, false, false, false, r.cfg.queueArguments()); err != nil {
		var ae *amqp.Error
		fix := ""
		if errors.As(err, &ae) {
			fix = queueMismatchFix(q, ae.Reason)
		}
		return setupError("declare queue "+q, err, fix)
	}
	for _, key := range r.cfg.Bindings {
		if err := ch.QueueBind(q, key, r.cfg.Exchange, false, nil); err != nil {
			return setupError(fmt.Sprintf("bind queue %s to %s with %q", q, r.cfg.Exchange, key), err, "")
		}
	}
	if err := ch.Qos(r.cfg.Prefetch, 0, false); err != nil {
		return brokerError("set prefetch", err)
	}
	s.tag = "inbox-" + rand.Text()
	s.feed = newFeed(ch, q, s.tag, -1, false)
	r.log.Info("inbox runner consuming", "exchange", r.cfg.Exchange, "bindings", r.cfg.Bindings,
		"prefetch", r.cfg.Prefetch, "workers", r.cfg.Workers, "consumer_tag", s.tag)
	return nil
}

// consume hands the session's deliveries to d until ctx is cancelled (nil: the consumer is cancelled,
// the deliveries not handed over are requeued, the channel stays open for the drain's acks) or the
// channel goes away (the error carries the broker's reason).
func (s *session) consume(ctx context.Context, d *dispatcher) error {
	if s.group != nil {
		return s.consumeGroup(ctx, d)
	}
	deliveries, err := s.ch.Consume(d.r.cfg.Queue, s.tag, false, false, false, false, nil)
	if err != nil {
		s.feed.dead.Store(true)
		return brokerError("consume "+d.r.cfg.Queue, err)
	}
	for {
		select {
		case <-ctx.Done():
			d.stop()
			if err := s.ch.Cancel(s.tag, false); err != nil {
				d.r.log.Warn("inbox runner consumer cancel failed", "error", err)
			}
			for dl := range deliveries {
				_ = dl.Nack(false, true) // the final multiple nack covers a failure
			}
			return nil
		case dl, ok := <-deliveries:
			if !ok {
				s.feed.dead.Store(true)
				return s.lost()
			}
			d.r.m.received(dl)
			s.feed.enter()
			if !d.submit(newJob(dl, s.feed)) {
				s.feed.settled()
				_ = dl.Nack(false, true)
			}
		}
	}
}

// lost returns why the channel went away, with the broker's code and reason when it gave one.
func (s *session) lost() error {
	t := time.NewTimer(time.Second)
	defer t.Stop()
	canceled := s.canceled
	for {
		select {
		case e := <-s.chClosed:
			return closeReason(e)
		case e := <-s.closed:
			return closeReason(e)
		case tag, ok := <-canceled:
			if !ok { // closed with the channel: the close notification says why
				canceled = nil
				continue
			}
			return fmt.Errorf("consume: %w: RabbitMQ cancelled consumer %s (queue deleted, or its node is down)", ErrChannelClosed, tag)
		case <-t.C:
			return fmt.Errorf("consume: %w: no reason given", ErrChannelClosed)
		}
	}
}

func closeReason(e *amqp.Error) error {
	if e == nil {
		return fmt.Errorf("consume: %w: no reason given", ErrChannelClosed)
	}
	return brokerError("consume", e)
}

// close requeues whatever the channel still holds unacknowledged and closes the channel and the
// connection. It is called only when no handler of this session runs any more, or when it is dead.
func (s *session) close(log *slog.Logger) {
	if s.feed != nil {
		s.feed.dead.Store(true)
	}
	if s.group != nil {
		s.group.close()
	}
	if s.ch != nil && !s.ch.IsClosed() {
		// Delivery tag 0 with multiple set is "every outstanding delivery on this channel".
		if err := s.ch.Nack(0, true, true); err != nil {
			log.Debug("inbox runner final requeue failed", "error", err)
		}
		_ = s.ch.Close()
	}
	if !s.conn.IsClosed() {
		_ = s.conn.Close()
	}
}

// redactURL names the broker of an AMQP URL without its credentials.
func redactURL(url string) string {
	u, err := amqp.ParseURI(url)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Host + ":" + strconv.Itoa(u.Port) + "/" + u.Vhost
}
