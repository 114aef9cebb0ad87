package route

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestDialAtTheVhostConnectionLimitIsRetried: a vhost whose max-connections is reached (connections of a
// cut lingering on the broker) refuses the router's connection with 530 NOT_ALLOWED, as a vhost the user
// may not use does; Dial reports it as ErrConnectionLimit, which the caller retries, not as a refused
// vhost, and its sentence keeps the broker's words and names the fix. The vhost is the test's own.
func TestDialAtTheVhostConnectionLimitIsRetried(t *testing.T) {
	u, err := amqp.ParseURI(testenv.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	vhost := testenv.Name(t)
	run := func(args ...string) {
		t.Helper()
		if out, err := testenv.Rabbitmqctl(t, args...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %s: %v\n%s", args[0], err, out)
		}
	}
	run("add_vhost", vhost)
	t.Cleanup(func() { _ = testenv.Rabbitmqctl(t, "delete_vhost", vhost).Run() })
	run("set_permissions", "-p", vhost, u.Username, ".*", ".*", ".*")
	run("set_vhost_limits", "-p", vhost, `{"max-connections": 0}`)
	u.Vhost = vhost

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Dial(ctx, Config{URL: u.String(), Exchange: vhost}, nil)
	if err == nil {
		r.Close()
		t.Fatal("Dial succeeded on a vhost at its connection limit")
	}
	t.Logf("%v", err)
	if !errors.Is(err, ErrConnectionLimit) || errors.Is(err, ErrAccessRefused) {
		t.Errorf("Dial error = %v; want ErrConnectionLimit (retried), not ErrAccessRefused (permanent)", err)
	}
	for _, want := range []string{"connection limit (0) is reached", "max-connections", "set_vhost_limits -p " + vhost} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
}
