package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// rabbitmqctlLines are the rabbitmqctl commands of the shell blocks of docs/howto/secure.md's RabbitMQ users section,
// each split into its arguments (single quotes removed), with the documented names replaced as names says.
func rabbitmqctlLines(t *testing.T, names map[string]string) [][]string {
	t.Helper()
	b, err := os.ReadFile("../docs/howto/secure.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	text = text[strings.Index(text, "\n## RabbitMQ users"):]
	text = text[:strings.Index(text[1:], "\n## ")+1]
	var lines [][]string
	word := regexp.MustCompile(`'[^']*'|\S+`)
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "rabbitmqctl ") {
			continue
		}
		var args []string
		for _, w := range word.FindAllString(line, -1)[1:] {
			w = strings.Trim(w, "'")
			for from, to := range names {
				w = regexp.MustCompile(`\b`+from+`\b`).ReplaceAllString(w, to)
			}
			args = append(args, w)
		}
		lines = append(lines, args)
	}
	return lines
}

// TestDocumentedBrokerPermissions gives the router and a consumer the RabbitMQ users docs/howto/secure.md's
// Security section sets up (with the test's own names): the router streams and publishes with its user;
// the consumer declares its queue, binds it to the router's exchange and receives the event, and its
// publish to the router's exchange is refused.
func TestDocumentedBrokerPermissions(t *testing.T) {
	e := newStreamEnv(t)
	routerUser, consumerUser := "u_"+e.slot, "c_"+e.slot
	lines := rabbitmqctlLines(t, map[string]string{"outbox": e.exchange, "cdc_router": routerUser, "order_totals": consumerUser})
	if len(lines) != 4 {
		t.Fatalf("docs/howto/secure.md's RabbitMQ users section has %d rabbitmqctl lines, want 4 (two users, their permissions)", len(lines))
	}
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, user := range []string{routerUser, consumerUser} {
			wg.Go(func() { testenv.Rabbitmqctl(t, "delete_user", user).Run() })
		}
		wg.Wait()
	})
	// Each user's two lines in order, the two users at once: rabbitmqctl takes seconds to start.
	failures := make(chan string, len(lines))
	var wg sync.WaitGroup
	for i := 0; i < len(lines); i += 2 {
		wg.Go(func() {
			for _, args := range lines[i : i+2] {
				if out, err := testenv.Rabbitmqctl(t, args...).CombinedOutput(); err != nil {
					failures <- fmt.Sprintf("rabbitmqctl %s: %v\n%s", strings.Join(args, " "), err, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(failures)
	for f := range failures {
		t.Fatal(f)
	}
	as := func(user string) string {
		u, err := url.Parse(e.amqpURL)
		if err != nil {
			t.Fatal(err)
		}
		u.User = url.UserPassword(user, "change-me")
		return u.String()
	}
	conn, err := amqp.Dial(as(consumerUser))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	queue := consumerUser + ".orders"
	t.Cleanup(func() { e.channel().QueueDelete(queue, false, false, false) })
	if _, err := ch.QueueDeclare(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("the consumer declares its queue: %v", err)
	}
	if err := ch.QueueBind(queue, "#", e.exchange, false, nil); err != nil {
		t.Fatalf("the consumer binds its queue to the router's exchange: %v", err)
	}
	msgs, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}

	r := e.start(as(routerUser))
	r.waitLog("msg=streaming ", 30*time.Second)
	var id string
	if err := e.db.QueryRow(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', '1', 1, 'paid', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		if m.MessageId != id {
			t.Fatalf("the consumer received %s, want %s", m.MessageId, id)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the event published with the router's documented user did not arrive")
	}

	pub, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	closed := pub.NotifyClose(make(chan *amqp.Error, 1))
	pub.Publish(e.exchange, "order.paid", false, false, amqp.Publishing{MessageId: "forged", Body: []byte("{}")})
	select {
	case err := <-closed:
		var ae *amqp.Error
		if !errors.As(err, &ae) || ae.Code != amqp.AccessRefused {
			t.Fatalf("the consumer's publish to the router's exchange: %v, want ACCESS_REFUSED", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the consumer published to the router's exchange")
	}
}
