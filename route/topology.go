package route

import (
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/route/rabbitmq"
)

// declare declares cfg's topology on a channel of its own of conn (rabbitmq.Declare): the alternate
// exchange (durable fanout), its queue (durable, same name, of cfg.UnroutableQueueType) and binding, then the
// exchange (durable topic, alternate-exchange argument); the first failure ends it, as one sentence.
func declare(conn *amqp.Connection, cfg Config, uri amqp.URI) error {
	return rabbitmq.Declare(conn, rabbitmq.Topology{Exchange: cfg.Exchange, AlternateExchange: cfg.AlternateExchange,
		NoAlternateExchange: cfg.NoAlternateExchange, QueueType: cfg.UnroutableQueueType}, uri.Username, uri.Vhost)
}
