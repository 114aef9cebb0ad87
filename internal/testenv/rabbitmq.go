package testenv

import (
	"os"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// AMQPURL returns the URL of the RabbitMQ the tests use (CDC_ROUTER_TEST_AMQP_URL, default the local
// broker with guest/guest) after checking that it accepts a connection. It fails the test when it does not.
func AMQPURL(t testing.TB) string {
	t.Helper()
	url := os.Getenv("CDC_ROUTER_TEST_AMQP_URL")
	if url == "" {
		url = defaultAMQPURL
	}
	var err error
	for i := 0; i < 20; i++ {
		var c *amqp.Connection
		if c, err = amqp.Dial(url); err == nil {
			c.Close()
			return url
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("RabbitMQ is not reachable at %s (%v): start it with `rabbitmq-server -detached` or run `make test`, which starts it", redact(url), err)
	return ""
}

const defaultAMQPURL = "amqp://guest:guest@127.0.0.1:5672/"

func redact(url string) string {
	if u, err := amqp.ParseURI(url); err == nil {
		u.Password = "xxxxx"
		return u.String()
	}
	return "the configured URL"
}
