package runner

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
)

// Config configures a Runner. Defaults fills in every unset field that has a default; URLs, Queue
// and Bindings have none.
type Config struct {
	// URLs are the AMQP URLs of the broker (or the nodes of a cluster), tried in order on every
	// (re)connect. Required. Passwords are never logged.
	URLs []string
	// Exchange is cdc-router's exchange. The runner waits for the router to declare it (a passive
	// declare, retried, with a log line every ExchangeWaitLog) and never declares it itself: the router
	// declares it with an alternate-exchange argument and refuses an exchange declared without one.
	// Default "outbox".
	Exchange string
	// Queue is declared durable on every (re)connect, with the arguments below. Required. RabbitMQ
	// refuses a declaration whose arguments differ from those the queue was created with, and queue
	// arguments cannot be changed in place: Run returns that refusal naming the argument and the fix.
	Queue string
	// Quorum declares Queue as a quorum queue (x-queue-type=quorum); the same as QueueType "quorum".
	Quorum bool
	// QueueType is x-queue-type: "classic" or "quorum". Default "" declares none (a classic queue, or
	// quorum when Quorum is set); a queue that exists with a type must be declared with it.
	QueueType string
	// SingleActiveConsumer declares x-single-active-consumer: of several runners on Queue, the broker
	// delivers to one at a time and switches to another when it goes away, so the events of an
	// aggregate are never processed by two instances at once and none parks for that reason
	// (docs/scaling.md).
	SingleActiveConsumer bool
	// DeadLetterExchange and DeadLetterRoutingKey declare x-dead-letter-exchange and
	// x-dead-letter-routing-key: where the broker moves a message that is rejected without requeue,
	// expires, or passes DeliveryLimit. The runner itself never rejects without requeue.
	DeadLetterExchange, DeadLetterRoutingKey string
	// DeliveryLimit declares x-delivery-limit (quorum queues only): after that many returns to the
	// queue (a requeue, a lost consumer) the broker drops or dead-letters the message. A dead-lettered
	// event leaves a gap that parks its aggregate's later versions until it is replayed or the gap is
	// resolved (ResolveParked). Default 0 declares none (RabbitMQ 4 then applies 20).
	DeliveryLimit int
	// QueueArguments are further x-arguments declared as they are (x-max-length, x-message-ttl, …). A
	// key that one of the fields above sets is refused: use the field.
	QueueArguments amqp.Table
	// Bindings are the routing keys Queue is bound with to Exchange on every (re)connect, for example
	// "order.#" (routing keys are "<aggregate_type>.<event_type>"). At least one is required.
	Bindings []string

	// Partitions, when above 0, makes the runner one instance of a partitioned consumer group named by
	// Queue: each aggregate's events go to one of Partitions queues (<Queue>.<i>-of-<N>, by the
	// aggregate_bucket header cdc-router sets), each partition is consumed by one instance at a time, and
	// the instances of the group (any number, each with this same Config) share the partitions evenly and
	// take over those of an instance that stops or dies within about RebalanceInterval. Order per
	// aggregate holds and no event parks for having raced another instance. Between 1 and 64; a divisor
	// of 64 (2, 4, 8, 16, 32) gives every partition the same share. Changing it is a new group: see
	// docs/consumer-groups.md. SingleActiveConsumer is implied. Default 0: one queue, Queue.
	Partitions int
	// RebalanceInterval is how often an instance of a partitioned group looks at the group's members and
	// takes or releases partitions accordingly: the pause of a partition whose instance died. Default 1s.
	RebalanceInterval time.Duration

	// Workers is how many events are processed at once. Events of one aggregate are never processed
	// concurrently whatever the count. Default 4.
	Workers int
	// Prefetch is the basic.qos prefetch count: how many unacknowledged deliveries the runner holds,
	// including those waiting behind an earlier event of their aggregate. At least Workers. Default 64.
	Prefetch int
	// DrainTimeout bounds a graceful stop: when Run's context is cancelled the runner stops consuming,
	// lets the handlers in flight finish with their context intact, and only after DrainTimeout cancels
	// their context. Deliveries not processed are requeued. Default 30s.
	DrainTimeout time.Duration
	// RetryMin is the first wait before a delivery whose Process returned an error is retried (or one
	// ahead of a gap, under policy Requeue, is requeued); it doubles, with jitter, on each failure of the
	// same delivery up to RetryMax. Defaults 100ms and 10s.
	RetryMin, RetryMax time.Duration
	// ReconnectMin is the first wait before connecting again after a connection or channel loss; it
	// doubles, with jitter, on each failed attempt up to ReconnectMax. Defaults 500ms and 30s.
	ReconnectMin, ReconnectMax time.Duration
	// ExchangeWaitLog is how often a runner waiting for Exchange logs that it is still waiting.
	// Default 30s.
	ExchangeWaitLog time.Duration
	// RequestPoll is how often the runner looks for repair requests filed for its consumer
	// (Admin.Request, `cdc-router inbox retry|resolve`) and carries them out with its inbox.Processor.
	// Default 1s; negative takes none.
	RequestPoll time.Duration
	// ConnectionName is the connection_name client property, shown by the management UI and rabbitmqctl.
	// Default "cdc-router inbox <consumer>" (inbox.Config.Consumer).
	ConnectionName string

	// Registerer receives the runner's metrics (see the inbox_ metrics in docs/consumers.md);
	// nil registers none. The global registry is never used implicitly.
	Registerer prometheus.Registerer
	// OnOutcome, if set, is called after each Process with the event, its result and its error, from the
	// worker that processed it (so concurrently, and before the delivery is acknowledged). It must be
	// quick and must not panic.
	OnOutcome func(inbox.Event, inbox.Result, error)
}

// Defaults returns the configuration with every unset field set to its documented default.
func (c Config) Defaults() Config {
	if c.Exchange == "" {
		c.Exchange = "outbox"
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Prefetch == 0 {
		c.Prefetch = max(64, c.Workers)
	}
	if c.DrainTimeout == 0 {
		c.DrainTimeout = 30 * time.Second
	}
	if c.RetryMin == 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(10*time.Second, c.RetryMin)
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = 500 * time.Millisecond
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = max(30*time.Second, c.ReconnectMin)
	}
	if c.RequestPoll == 0 {
		c.RequestPoll = time.Second
	}
	if c.ExchangeWaitLog == 0 {
		c.ExchangeWaitLog = 30 * time.Second
	}
	if c.RebalanceInterval == 0 {
		c.RebalanceInterval = time.Second
	}
	return c
}

// Validate reports the first field that cannot work, in a sentence naming the fix.
func (c Config) Validate() error {
	if len(c.URLs) == 0 {
		return fmt.Errorf("inbox runner config: URLs is empty; set runner.Config.URLs to the broker's AMQP URL, e.g. amqp://user:password@host:5672/")
	}
	for i, u := range c.URLs {
		if _, err := amqp.ParseURI(u); err != nil { // its text may quote the URL, password included
			return fmt.Errorf("inbox runner config: URLs[%d] is not an AMQP URL; use amqp://user:password@host:5672/vhost", i)
		}
	}
	switch {
	case c.Queue == "":
		return fmt.Errorf("inbox runner config: Queue is empty; name the queue this consumer reads, e.g. \"orders-projection\"")
	case len(c.Bindings) == 0:
		return fmt.Errorf("inbox runner config: Bindings is empty; bind the queue with the routing keys of the events it needs, e.g. \"order.#\"")
	case c.Workers < 1:
		return fmt.Errorf("inbox runner config: Workers %d is below 1", c.Workers)
	case c.Prefetch < c.Workers || c.Prefetch > 65535:
		return fmt.Errorf("inbox runner config: Prefetch %d must be between Workers (%d) and 65535, or workers sit idle", c.Prefetch, c.Workers)
	case c.DrainTimeout < 0:
		return fmt.Errorf("inbox runner config: DrainTimeout %v is negative", c.DrainTimeout)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("inbox runner config: RetryMin %v and RetryMax %v must satisfy 0 < RetryMin <= RetryMax", c.RetryMin, c.RetryMax)
	case c.ReconnectMin <= 0 || c.ReconnectMax < c.ReconnectMin:
		return fmt.Errorf("inbox runner config: ReconnectMin %v and ReconnectMax %v must satisfy 0 < ReconnectMin <= ReconnectMax", c.ReconnectMin, c.ReconnectMax)
	case c.ExchangeWaitLog < 0:
		return fmt.Errorf("inbox runner config: ExchangeWaitLog %v is negative", c.ExchangeWaitLog)
	}
	if err := c.validateQueueArguments(); err != nil {
		return err
	}
	if err := c.validatePartitions(); err != nil {
		return err
	}
	for i, b := range c.Bindings {
		if b == "" {
			return fmt.Errorf("inbox runner config: Bindings[%d] is empty; use \"#\" to bind every routing key", i)
		}
	}
	return nil
}
