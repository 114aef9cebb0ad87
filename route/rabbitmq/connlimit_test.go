package rabbitmq

import (
	"errors"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestConnectionLimitIsNoRefusedVhost: RabbitMQ refuses a connection over a vhost's or a user's
// max-connections with 530 NOT_ALLOWED, as it refuses a vhost the user may not use; but a limit is reached
// for a while (stale connections after a cut linger until the broker notices), so it is retried
// (ErrConnectionLimit, neither ErrAccessRefused nor ErrUnreachable: every node would answer the same), in a
// sentence that keeps the broker's words and names the fix. The reasons are RabbitMQ 3.10's, verbatim.
func TestConnectionLimitIsNoRefusedVhost(t *testing.T) {
	uri := amqp.URI{Scheme: "amqp", Host: "127.0.0.1", Port: 5672, Username: "app", Password: "s3cret", Vhost: "orders"}
	for reason, fix := range map[string]string{
		"NOT_ALLOWED - access to vhost 'orders' refused for user 'app': connection limit (1) is reached": "set_vhost_limits -p orders",
		"NOT_ALLOWED - connection refused for user 'app': user connection limit (0) is reached":          "set_user_limits app",
	} {
		err := DialError(uri, &amqp.Error{Code: amqp.NotAllowed, Reason: reason, Server: true})
		if !errors.Is(err, ErrConnectionLimit) || errors.Is(err, ErrAccessRefused) || errors.Is(err, ErrUnreachable) {
			t.Errorf("%s: %v; want ErrConnectionLimit alone, so the router retries", reason, err)
		}
		for _, want := range []string{reason, fix, "max-connections", "close_connection"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q lacks %q", err, want)
			}
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("%q shows the password", err)
		}
	}
	// A vhost the user may not use stays a refusal.
	err := DialError(uri, &amqp.Error{Code: amqp.NotAllowed, Server: true,
		Reason: "NOT_ALLOWED - access to vhost 'orders' refused for user 'app'"})
	if !errors.Is(err, ErrAccessRefused) {
		t.Errorf("a refused vhost: %v; want ErrAccessRefused", err)
	}
}
