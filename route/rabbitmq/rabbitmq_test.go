package rabbitmq

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
)

// TestSplit: only a comma directly followed by a scheme begins the next URL; a comma in a password or a
// parameter stays in its URL; spaces around each URL go; a trailing or leading comma leaves an empty URL.
func TestSplit(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"amqp://u:p@a:5672/", []string{"amqp://u:p@a:5672/"}},
		{"amqp://u:p@a/,amqp://u:p@b/", []string{"amqp://u:p@a/", "amqp://u:p@b/"}},
		{" amqp://a/ , amqps://b/?cacertfile=/x ,amqp://c/ ", []string{"amqp://a/", "amqps://b/?cacertfile=/x", "amqp://c/"}},
		{"amqp://u:pa,ss@a/", []string{"amqp://u:pa,ss@a/"}},                       // a comma in a password
		{"amqp://a/?auth_mechanism=a,b", []string{"amqp://a/?auth_mechanism=a,b"}}, // in a parameter
		{"amqp://a/,", []string{"amqp://a/", ""}},
		{",amqp://a/", []string{"", "amqp://a/"}},
	}
	for _, tt := range tests {
		if got := Split(tt.in); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Split(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestHomeNodeDownNamesTheQuorumQueue: a classic alternate queue whose cluster node is down makes every
// declaration fail with 404; the error says so, is retried (ErrUnreachable), and names the fix.
func TestHomeNodeDownNamesTheQuorumQueue(t *testing.T) {
	t0 := Topology{Exchange: "outbox", AlternateExchange: "outbox.unroutable", QueueType: QueueTypeClassic}
	err := declareError(t0, "u", "/", "queue", "outbox.unroutable", &amqp.Error{Code: amqp.NotFound,
		Reason: "NOT_FOUND - home node 'rabbit@n2' of durable queue 'outbox.unroutable' in vhost '/' is down or inaccessible"})
	if !errors.Is(err, ErrUnreachable) {
		t.Errorf("err = %v, want ErrUnreachable, so the router retries", err)
	}
	for _, want := range []string{"cluster node it lives on is down", "--unroutable-queue-type quorum", "rabbitmqadmin delete queue name=outbox.unroutable"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}
