package route

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/route/rabbitmq"
)

// Defaults applied by Dial to the zero fields of a Config.
const (
	DefaultExchange       = "outbox"
	DefaultLanes          = 4
	DefaultWindow         = 512
	DefaultConfirmTimeout = 60 * time.Second
	DefaultConnectionName = "cdc-router"
	// DefaultMaxInflightBytes bounds the bytes of unconfirmed messages held across all lanes: 64 MiB.
	DefaultMaxInflightBytes = 64 << 20
	// DefaultAggregateWindow is the number of unconfirmed events an aggregate may have: one, so that a
	// refused event has no later event of its aggregate routed before it (ADR 0006).
	DefaultAggregateWindow = 1
	// DefaultMaxHeld bounds the events held behind their aggregate across the lanes (ADR 0009): enough for
	// a 30,000-event run of one aggregate to wait aside while the others go on.
	DefaultMaxHeld = 32 << 10
	// UnroutableSuffix is appended to Exchange to name the default alternate exchange and its queue.
	UnroutableSuffix = ".unroutable"
	// QueueTypeClassic and QueueTypeQuorum are the types the unroutable queue can be declared with.
	QueueTypeClassic = rabbitmq.QueueTypeClassic
	QueueTypeQuorum  = rabbitmq.QueueTypeQuorum

	maxLanes  = 1024    // well below RabbitMQ's default channel_max (2047)
	maxWindow = 1 << 16 // a window larger than this only holds memory
	maxHeld   = 1 << 20
)

// Config configures a Router. The zero value of every field but URL means its default.
type Config struct {
	// URL is the AMQP URL, amqp://user:password@host:5672/vhost (required), or several, separated by
	// commas, for the nodes of a RabbitMQ cluster: amqp://u:p@node1:5672/,amqp://u:p@node2:5672/. They are
	// tried in order, and a Dialer starts each new connection with the address after the last one used
	// (see SplitURLs and Dialer). Only host:port of an address is ever logged.
	URL string
	// Exchange is the durable topic exchange the events are published to; default "outbox".
	Exchange string
	// AlternateExchange is the durable fanout exchange that receives what Exchange cannot route; a durable
	// queue of the same name is bound to it. Default Exchange+".unroutable". Ignored with NoAlternateExchange.
	AlternateExchange string
	// NoAlternateExchange declares Exchange without an alternate exchange: an unroutable event is then
	// returned by the broker and fails the Router.
	NoAlternateExchange bool
	// UnroutableQueueType is the x-queue-type of the alternate exchange's queue: "classic" (the default) or
	// "quorum" (replicated, for clusters: RabbitMQ 4 has no mirrored classic queues; a classic queue lives on
	// one node, and while that node is down the router cannot declare its topology on any other node). A
	// queue that already exists with the other type makes Dial and Declare fail with ErrExchangeMismatch.
	UnroutableQueueType string
	// Lanes is the number of confirm-mode channels; default 4.
	Lanes int
	// Window is the number of unconfirmed messages allowed per lane; default 512. With AdaptiveWindow it
	// is the most each lane's limit may be.
	Window int
	// AdaptiveWindow adapts the lanes' limit below Window to the confirm round trip and rate (vegas, one
	// limit for all lanes: as many as keep the broker busy without a backlog of unconfirmed messages in its
	// queues, and more while more in flight brings more confirms per second); default off.
	AdaptiveWindow bool
	// AggregateWindow is the number of unconfirmed events one aggregate may have in flight; default 1.
	// With 1, an event the broker refuses (a nack, a return) has no later event of its aggregate written
	// before it, so consumers first see the aggregate's events in order even after the restart (ADR 0006),
	// and one aggregate moves at one event per confirm round trip. More lets a hot aggregate's events be
	// pipelined: after a refusal, up to AggregateWindow-1 later events of it may reach the queue before the
	// refused one is published again (consumers that check versions, like the inbox, then hold or park them).
	AggregateWindow int
	// MaxHeld bounds the events held behind an unconfirmed event of their aggregate, across all lanes;
	// default DefaultMaxHeld. Held events take no slot of a lane's window, so other aggregates go on
	// past a long run of one; Publish of an event that would be held waits while MaxHeld are.
	MaxHeld int
	// ConfirmTimeout is how long a published message may stay unconfirmed before the Router fails;
	// default 60 s. Keep it above the heartbeat timeout.
	ConfirmTimeout time.Duration
	// ConnectionName is shown in the RabbitMQ management UI; default "cdc-router".
	ConnectionName string
	// MaxInflightBytes bounds the memory of the publish window: the bytes (body and encoded content header)
	// of the messages handed to Publish and not yet confirmed, across all lanes. Publish blocks while one
	// more event would go over it, except that an event is always taken when nothing else is in flight, so
	// an event larger than the bound goes through alone. Default DefaultMaxInflightBytes (64 MiB).
	MaxInflightBytes int
	// Metrics, when set, receives the Router's nacks, returns and confirm round trips and reads its
	// in-flight events and bytes and its blocked state at scrape time (NewMetrics). Nil records nothing.
	Metrics *Metrics
	// Fence, when set, is asked right before each message is written to RabbitMQ (fence.go); an error fails
	// the Router with it, and nothing more is written. The stream sets it to keep a router that may have lost
	// its PostgreSQL slot (a paused process) from publishing after the router that took the slot over.
	Fence Fence
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Exchange == "" {
		c.Exchange = DefaultExchange
	}
	if c.AlternateExchange == "" {
		c.AlternateExchange = c.Exchange + UnroutableSuffix
	}
	if c.NoAlternateExchange {
		c.AlternateExchange = ""
	}
	if c.UnroutableQueueType == "" {
		c.UnroutableQueueType = QueueTypeClassic
	}
	if c.Lanes == 0 {
		c.Lanes = DefaultLanes
	}
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.AggregateWindow == 0 {
		c.AggregateWindow = DefaultAggregateWindow
	}
	if c.MaxHeld == 0 {
		c.MaxHeld = DefaultMaxHeld
	}
	if c.ConfirmTimeout == 0 {
		c.ConfirmTimeout = DefaultConfirmTimeout
	}
	if c.ConnectionName == "" {
		c.ConnectionName = DefaultConnectionName
	}
	if c.MaxInflightBytes == 0 {
		c.MaxInflightBytes = DefaultMaxInflightBytes
	}
	return c
}

// Validate reports the first setting that cannot work, after applying the defaults, as one sentence that
// names the fix. It never includes the password of the URL.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, err := parseAddresses(c.URL); err != nil {
		return err
	}
	if err := checkName("exchange", c.Exchange); err != nil {
		return err
	}
	if !c.NoAlternateExchange {
		if err := checkName("alternate exchange", c.AlternateExchange); err != nil {
			return err
		}
		if c.AlternateExchange == c.Exchange {
			return fmt.Errorf("%w: the alternate exchange must differ from the exchange %q: choose another name", ErrInvalidConfig, c.Exchange)
		}
	}
	switch {
	case c.UnroutableQueueType != QueueTypeClassic && c.UnroutableQueueType != QueueTypeQuorum:
		return fmt.Errorf("%w: the unroutable queue type is %q: choose %s or %s", ErrInvalidConfig,
			c.UnroutableQueueType, QueueTypeClassic, QueueTypeQuorum)
	case c.Lanes < 0 || c.Lanes > maxLanes:
		return fmt.Errorf("%w: lanes is %d: choose between 1 and %d", ErrInvalidConfig, c.Lanes, maxLanes)
	case c.Window < 0 || c.Window > maxWindow:
		return fmt.Errorf("%w: window is %d: choose between 1 and %d", ErrInvalidConfig, c.Window, maxWindow)
	case c.AggregateWindow < 0 || c.AggregateWindow > c.Window:
		return fmt.Errorf("%w: aggregate window is %d: choose between 1 and the window (%d)", ErrInvalidConfig, c.AggregateWindow, c.Window)
	case c.MaxHeld < 0 || c.MaxHeld > maxHeld:
		return fmt.Errorf("%w: max held events is %d: choose between 1 and %d", ErrInvalidConfig, c.MaxHeld, maxHeld)
	case c.ConfirmTimeout < 0:
		return fmt.Errorf("%w: confirm timeout is %s: choose a positive duration", ErrInvalidConfig, c.ConfirmTimeout)
	case c.MaxInflightBytes < 0:
		return fmt.Errorf("%w: max in-flight bytes is %d: choose a positive number of bytes (default %d, 64 MiB)",
			ErrInvalidConfig, c.MaxInflightBytes, DefaultMaxInflightBytes)
	}
	return nil
}

// checkName rejects names RabbitMQ would refuse to declare.
func checkName(what, name string) error {
	switch {
	case len(name) > 255:
		return fmt.Errorf("%w: the %s name is %d bytes long: choose one of at most 255 bytes", ErrInvalidConfig, what, len(name))
	case strings.HasPrefix(name, "amq."):
		return fmt.Errorf("%w: the %s name %q starts with the reserved prefix \"amq.\": choose another name", ErrInvalidConfig, what, name)
	}
	return nil
}

// ErrInvalidConfig is wrapped by every error of Config.Validate.
var ErrInvalidConfig = errors.New("invalid route configuration")

// Declared is the topology Declare and Dial declare with c, defaults applied: the exchange, and the
// alternate exchange and its queue (one name; empty with NoAlternateExchange).
func (c Config) Declared() (exchange, alternate string) {
	c = c.withDefaults()
	return c.Exchange, c.AlternateExchange
}
