package message

import "github.com/cdc-router/cdc-router/internal/cdc"

// Destination is the exchange and routing key Publish sends ev to from a Router whose exchange is
// exchange: an event of a mapped table goes with the mapping's routing key, to the exchange its topic
// names with amqp.topic.target=exchange; a native event goes to exchange with RoutingKey(ev).
func Destination(ev cdc.Event, exchange string) (string, string) {
	if ev.Mapped == nil {
		return exchange, RoutingKey(ev)
	}
	if ev.Mapped.ByExchange {
		exchange = ev.Mapped.Exchange
	}
	return exchange, ev.Mapped.RoutingKey
}
