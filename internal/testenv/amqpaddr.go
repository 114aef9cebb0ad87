package testenv

import (
	"net"
	"strconv"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQPAddr is host:port of the RabbitMQ the tests use (see AMQPURL), for a Proxy in front of it.
func AMQPAddr(t testing.TB) string {
	t.Helper()
	u, err := amqp.ParseURI(AMQPURL(t))
	if err != nil {
		t.Fatalf("CDC_ROUTER_TEST_AMQP_URL: %v", err)
	}
	return net.JoinHostPort(u.Host, strconv.Itoa(u.Port))
}
