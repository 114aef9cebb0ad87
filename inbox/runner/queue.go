package runner

import (
	"fmt"
	"regexp"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Queue argument names the Config fields declare.
const (
	argSingleActiveConsumer = "x-single-active-consumer"
	argDeadLetterExchange   = "x-dead-letter-exchange"
	argDeadLetterRoutingKey = "x-dead-letter-routing-key"
	argDeliveryLimit        = "x-delivery-limit"
)

// queueFields names the Config field that declares each argument, for the refusal's fix.
var queueFields = map[string]string{
	amqp.QueueTypeArg:       "QueueType (or Quorum)",
	argSingleActiveConsumer: "SingleActiveConsumer",
	argDeadLetterExchange:   "DeadLetterExchange",
	argDeadLetterRoutingKey: "DeadLetterRoutingKey",
	argDeliveryLimit:        "DeliveryLimit",
}

// queueType is the x-queue-type the configuration declares, "" for none.
func (c Config) queueType() string {
	if c.Quorum {
		return amqp.QueueTypeQuorum
	}
	return c.QueueType
}

func (c Config) validateQueueArguments() error {
	switch t := c.QueueType; {
	case t != "" && t != amqp.QueueTypeClassic && t != amqp.QueueTypeQuorum:
		return fmt.Errorf("inbox runner config: QueueType %q is not \"classic\" or \"quorum\" (a stream cannot be "+
			"consumed with per-message requeues)", t)
	case c.Quorum && t == amqp.QueueTypeClassic:
		return fmt.Errorf("inbox runner config: Quorum is set but QueueType is \"classic\"; set one of them")
	case c.DeliveryLimit < 0:
		return fmt.Errorf("inbox runner config: DeliveryLimit %d is negative; 0 declares none", c.DeliveryLimit)
	case c.DeliveryLimit > 0 && c.queueType() != amqp.QueueTypeQuorum:
		return fmt.Errorf("inbox runner config: DeliveryLimit needs a quorum queue; set QueueType \"quorum\"")
	case c.DeadLetterRoutingKey != "" && c.DeadLetterExchange == "":
		return fmt.Errorf("inbox runner config: DeadLetterRoutingKey is set without DeadLetterExchange; name " +
			"the exchange (\"\" for the default exchange is not declarable here: use a named one)")
	}
	for k := range c.QueueArguments {
		if field, ok := queueFields[k]; ok {
			return fmt.Errorf("inbox runner config: QueueArguments sets %s; use runner.Config.%s instead", k, field)
		}
	}
	return nil
}

// queueArguments is the x-arguments table the queue is declared with on every (re)connect, nil when
// it has none.
func (c Config) queueArguments() amqp.Table {
	args := amqp.Table{}
	for k, v := range c.QueueArguments {
		args[k] = v
	}
	if t := c.queueType(); t != "" {
		args[amqp.QueueTypeArg] = t
	}
	if c.SingleActiveConsumer {
		args[argSingleActiveConsumer] = true
	}
	if c.DeadLetterExchange != "" {
		args[argDeadLetterExchange] = c.DeadLetterExchange
	}
	if c.DeadLetterRoutingKey != "" {
		args[argDeadLetterRoutingKey] = c.DeadLetterRoutingKey
	}
	if c.DeliveryLimit > 0 {
		args[argDeliveryLimit] = int64(c.DeliveryLimit)
	}
	if len(args) == 0 {
		return nil
	}
	return args
}

// inequivalentArg finds the argument RabbitMQ names in its refusal of a queue declaration:
// "PRECONDITION_FAILED - inequivalent arg 'x-single-active-consumer' for queue 'q' in vhost '/': ...".
var inequivalentArg = regexp.MustCompile(`inequivalent arg '([^']+)'`)

// queueMismatchFix is the fix for a declaration of queue q refused with reason: the field to match
// the queue as it is, or how to change it.
func queueMismatchFix(q, reason string) string {
	arg := "its arguments"
	field := "the queue arguments (QueueType, SingleActiveConsumer, DeadLetterExchange, DeliveryLimit, QueueArguments)"
	if m := inequivalentArg.FindStringSubmatch(reason); m != nil {
		arg = m[1]
		switch f, ok := queueFields[arg]; {
		case ok:
			field = "runner.Config." + f
		case arg == "durable" || arg == "exclusive" || arg == "auto_delete":
			return fmt.Sprintf("queue %q exists and is not a plain durable queue (%s differs), which the runner "+
				"needs: drain it, delete it and let the runner declare it", q, arg)
		default:
			field = fmt.Sprintf("runner.Config.QueueArguments[%q]", arg)
		}
	}
	return fmt.Sprintf("queue %q exists with another %s than this runner declares: set %s to the queue's "+
		"current value (the broker's words above say which), or, to change it, drain the queue, delete it and "+
		"let the runner declare it again: RabbitMQ cannot change a queue's arguments in place (a policy can set "+
		"dead-lettering, a delivery limit, a length or a TTL without recreating the queue)", q, arg, field)
}
