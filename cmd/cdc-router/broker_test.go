package main

import (
	"errors"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/replication"
	"github.com/cdc-router/cdc-router/route/rabbitmq"
)

// TestBrokerErrorRetriesAConnectionLimit: a vhost at its max-connections (RabbitMQ 3.10's words) is
// retried by the stream, not the refusal of a vhost that stops the router.
func TestBrokerErrorRetriesAConnectionLimit(t *testing.T) {
	uri := amqp.URI{Scheme: "amqp", Host: "127.0.0.1", Port: 5672, Username: "app", Vhost: "orders"}
	limit := rabbitmq.DialError(uri, &amqp.Error{Code: amqp.NotAllowed, Server: true,
		Reason: "NOT_ALLOWED - access to vhost 'orders' refused for user 'app': connection limit (1) is reached"})
	var fatal *replication.Fatal
	if err := brokerError(limit); errors.As(err, &fatal) {
		t.Errorf("brokerError(%v) is fatal; want it retried", err)
	}
	refused := rabbitmq.DialError(uri, &amqp.Error{Code: amqp.NotAllowed, Server: true,
		Reason: "NOT_ALLOWED - vhost orders not found"})
	if err := brokerError(refused); !errors.As(err, &fatal) {
		t.Errorf("brokerError(%v) is not fatal; want a refused vhost to stop the router", err)
	}
}
