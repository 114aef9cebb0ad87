package testenv

import (
	"net/url"
	"testing"
)

// RabbitMQUser creates a RabbitMQ user of the test's own (rabbitmqctl add_user) with configure and read
// permission on everything in vhost "/" and write permission on what matches write (an Erlang regular
// expression: "^(?!x$).*" refuses writing to exchange x only), deletes it at cleanup, and returns the
// broker's URL with that user's credentials. It changes nothing broker-wide.
func RabbitMQUser(t testing.TB, write string) string {
	t.Helper()
	name, password := Name(t), Name(t)
	run := func(args ...string) {
		t.Helper()
		if out, err := Rabbitmqctl(t, args...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %s: %v\n%s", args[0], err, out)
		}
	}
	run("add_user", name, password)
	t.Cleanup(func() { _ = Rabbitmqctl(t, "delete_user", name).Run() })
	run("set_permissions", "-p", "/", name, ".*", write, ".*")
	u, err := url.Parse(AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(name, password)
	return u.String()
}
