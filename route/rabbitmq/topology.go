package rabbitmq

import (
	"errors"
	"fmt"
	"strings"

	amqp "github.com/rabbitmq/amqp091-go"
)

// QueueTypeClassic and QueueTypeQuorum are the types the unroutable queue can be declared with.
const (
	QueueTypeClassic = "classic"
	QueueTypeQuorum  = "quorum"
)

// Topology is what the router publishes to: Exchange, a durable topic exchange, and, unless
// NoAlternateExchange, its alternate exchange AlternateExchange (durable fanout) with a durable queue of the
// same name, of QueueType, bound to it.
type Topology struct {
	Exchange            string
	AlternateExchange   string
	NoAlternateExchange bool
	QueueType           string
}

// Declare declares t on a channel of its own of conn, as user on vhost (named in its errors): the alternate
// exchange, its queue and binding, then the exchange with its alternate-exchange argument. Each declaration
// that fails closes the channel, so the first failure ends it, as one sentence naming the fix.
func Declare(conn *amqp.Connection, t Topology, user, vhost string) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel to declare the topology: %w", err)
	}
	defer ch.Close()
	fail := func(what, name string, err error) error {
		return declareError(t, user, vhost, what, name, err)
	}
	var args amqp.Table
	if !t.NoAlternateExchange {
		ae := t.AlternateExchange
		if err := ch.ExchangeDeclare(ae, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return fail("exchange", ae, err)
		}
		if _, err := ch.QueueDeclare(ae, true, false, false, false, amqp.Table{"x-queue-type": t.QueueType}); err != nil {
			return fail("queue", ae, err)
		}
		if err := ch.QueueBind(ae, "", ae, false, nil); err != nil {
			return fail("binding of queue", ae, err)
		}
		args = amqp.Table{"alternate-exchange": ae}
	}
	if err := ch.ExchangeDeclare(t.Exchange, amqp.ExchangeTopic, true, false, false, false, args); err != nil {
		return fail("exchange", t.Exchange, err)
	}
	return nil
}

// declareError turns a failed declaration into one sentence naming the fix.
func declareError(t Topology, user, vhost, what, name string, err error) error {
	var aerr *amqp.Error
	if !errors.As(err, &aerr) {
		return fmt.Errorf("declare %s %q: %w", what, name, err)
	}
	switch {
	case aerr.Code == amqp.PreconditionFailed && name == t.Exchange:
		return &Sentence{Kind: ErrExchangeMismatch, Text: exchangeMismatch(t)}
	case aerr.Code == amqp.PreconditionFailed && what == "queue" && strings.Contains(aerr.Reason, "x-queue-type"):
		return &Sentence{Kind: ErrExchangeMismatch, Text: queueTypeMismatch(t, name, aerr.Reason)}
	case aerr.Code == amqp.PreconditionFailed:
		return &Sentence{Kind: ErrExchangeMismatch, Text: fmt.Sprintf(
			"%s %q already exists with other arguments (%s): delete it (rabbitmqadmin delete %s name=%s) so the router can declare it, "+
				"or start with --no-alternate-exchange, or choose another --exchange",
			what, name, aerr.Reason, what, name)}
	case aerr.Code == amqp.NotFound && what == "queue" && strings.Contains(aerr.Reason, "home node"):
		// A classic queue lives on one node of a cluster; the router retries until that node is back.
		return &Sentence{Kind: ErrUnreachable, Text: fmt.Sprintf(
			"queue %q cannot be declared while the cluster node it lives on is down (%d %s): with a RabbitMQ cluster, "+
				"delete it once that node is back (rabbitmqadmin delete queue name=%s) and run with --unroutable-queue-type quorum",
			name, aerr.Code, aerr.Reason, name)}
	case aerr.Code == amqp.AccessRefused:
		return &Sentence{Kind: ErrAccessRefused, Text: fmt.Sprintf(
			"user %q may not declare %s %q on vhost %q (403 ACCESS_REFUSED): grant it configure and write permissions on the vhost "+
				"(rabbitmqctl set_permissions -p <vhost> <user> \".*\" \".*\" \".*\")", user, what, name, vhost)}
	}
	return fmt.Errorf("declare %s %q: %d %s", what, name, aerr.Code, aerr.Reason)
}

// queueTypeMismatch is the sentence for an unroutable queue that exists with another x-queue-type; reason
// is RabbitMQ's, "... received 'classic' but current is 'quorum'".
func queueTypeMismatch(t Topology, name, reason string) string {
	keep := "choose another --alternate-exchange"
	_, current, _ := strings.Cut(reason, "current is ")
	if strings.HasPrefix(current, "none") {
		current = QueueTypeClassic // declared without x-queue-type, as before the setting existed
	} else {
		current, _, _ = strings.Cut(strings.TrimPrefix(current, "'"), "'")
	}
	if current == QueueTypeClassic || current == QueueTypeQuorum {
		keep = "start with --unroutable-queue-type " + current + " to keep it"
	}
	return fmt.Sprintf("the unroutable queue %q already exists with another type than --unroutable-queue-type %s (406 %s): "+
		"%s, or, to change its type, move its messages away (shovel them to another queue), delete it "+
		"(rabbitmqctl delete_queue %s) and start again so the router declares it as %s",
		name, t.QueueType, reason, keep, name, t.QueueType)
}

// exchangeMismatch is the sentence for a main exchange that exists with other arguments.
func exchangeMismatch(t Topology) string {
	del := fmt.Sprintf("delete it (rabbitmqadmin delete exchange name=%s) so the router can declare it", t.Exchange)
	if t.NoAlternateExchange {
		return fmt.Sprintf("exchange %q already exists with other arguments (declared with an alternate exchange, or not as a durable topic exchange?): "+
			"%s, or start without --no-alternate-exchange, or choose another --exchange", t.Exchange, del)
	}
	return fmt.Sprintf("exchange %q already exists with other arguments (declared without alternate-exchange %q?): "+
		"%s, or start with --no-alternate-exchange, or choose another --exchange", t.Exchange, t.AlternateExchange, del)
}
