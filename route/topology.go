package route

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// declare declares, on a channel of its own: the alternate exchange (durable fanout), its queue (durable,
// same name, of cfg.UnroutableQueueType) and binding, then the exchange (durable topic, alternate-exchange argument). Each
// declaration that fails closes the channel, so the first failure ends it.
func declare(conn *amqp.Connection, cfg Config, uri amqp.URI) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel to declare the topology: %w", err)
	}
	defer ch.Close()
	fail := func(what, name string, err error) error {
		return declareError(cfg, uri.Username, uri.Vhost, what, name, err)
	}
	var args amqp.Table
	if !cfg.NoAlternateExchange {
		ae := cfg.AlternateExchange
		if err := ch.ExchangeDeclare(ae, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
			return fail("exchange", ae, err)
		}
		if _, err := ch.QueueDeclare(ae, true, false, false, false, amqp.Table{"x-queue-type": cfg.UnroutableQueueType}); err != nil {
			return fail("queue", ae, err)
		}
		if err := ch.QueueBind(ae, "", ae, false, nil); err != nil {
			return fail("binding of queue", ae, err)
		}
		args = amqp.Table{"alternate-exchange": ae}
	}
	if err := ch.ExchangeDeclare(cfg.Exchange, amqp.ExchangeTopic, true, false, false, false, args); err != nil {
		return fail("exchange", cfg.Exchange, err)
	}
	return nil
}
