package testenv

import (
	"os"
	"os/exec"
	"testing"
)

// Rabbitmqctl returns a command running rabbitmqctl with args against the broker the tests use: the
// program CDC_ROUTER_TEST_RABBITMQCTL names when set (internal/testenv/rabbitmq4.sh prints one aimed at its
// node), else rabbitmqctl from PATH, which talks to the machine's own node. Tests that act on the whole
// broker (alarms, stop_app, policies, closing connections) must run it rather than rabbitmqctl directly, or
// they would act on another broker than the one under test. It fails the test when
// CDC_ROUTER_TEST_AMQP_URL points elsewhere and CDC_ROUTER_TEST_RABBITMQCTL is not set.
func Rabbitmqctl(t testing.TB, args ...string) *exec.Cmd {
	t.Helper()
	ctl := os.Getenv("CDC_ROUTER_TEST_RABBITMQCTL")
	if ctl == "" {
		if url := os.Getenv("CDC_ROUTER_TEST_AMQP_URL"); url != "" && url != defaultAMQPURL {
			t.Fatalf("CDC_ROUTER_TEST_AMQP_URL is %s but CDC_ROUTER_TEST_RABBITMQCTL is not set: set it to a rabbitmqctl aimed at that broker (internal/testenv/rabbitmq4.sh start prints both)", redact(url))
		}
		ctl = "rabbitmqctl"
	}
	return exec.Command(ctl, args...)
}
