package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/route/message/messagetest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestPublishToMappedExchange (amqp.topic.target=exchange): a mapped event goes to the exchange its routed
// topic names, with its routing key; one whose exchange does not exist is refused (ErrInvalidEvent, naming
// "declare exchange X") without failing the Router, and once the exchange is declared the next event goes
// there; the events of one key keep their order; a message nothing is bound to on such an exchange is
// returned and fails the Router with the exchange named, as on --exchange without an alternate exchange.
func TestPublishToMappedExchange(t *testing.T) {
	b := newBroker(t)
	r := b.dial(b.config(""))
	target, missing := b.exchange+".target", b.exchange+".missing"
	t.Cleanup(func() {
		_ = b.admin.ExchangeDelete(target, false, false)
		_ = b.admin.ExchangeDelete(missing, false, false)
	})
	if err := b.admin.ExchangeDeclare(target, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := b.admin.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.admin.QueueBind(q.Name, "k-1", target, false, nil); err != nil {
		t.Fatal(err)
	}
	to := func(exchange, key string, i int) (ev cdc.Event) {
		ev = messagetest.MappedEvent()
		ev.ID, ev.AggregateID = fmt.Sprintf("%s-%d", key, i), key
		ev.Mapped.ByExchange, ev.Mapped.Exchange, ev.Mapped.RoutingKey = true, exchange, key
		return ev
	}
	c := newCounter()
	publishAll(t, r, c, to(target, "k-1", 1), to(target, "k-1", 2), to(target, "k-1", 3))

	err = r.Publish(context.Background(), to(missing, "k-1", 4), c.done("k-1-4"))
	if !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), fmt.Sprintf("declare exchange %q", missing)) {
		t.Fatalf("Publish to a missing exchange = %v, want ErrInvalidEvent naming the fix", err)
	}
	if err := b.admin.ExchangeDeclare(missing, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.QueueBind(q.Name, "k-1", missing, false, nil); err != nil {
		t.Fatal(err)
	}
	publishAll(t, r, c, to(missing, "k-1", 5), to(target, "k-1", 6))
	var got []string
	for _, d := range b.consume(q.Name, 5, 10*time.Second) {
		got = append(got, d.Exchange+"/"+d.RoutingKey+"/"+d.MessageId)
	}
	want := []string{target + "/k-1/k-1-1", target + "/k-1/k-1-2", target + "/k-1/k-1-3", missing + "/k-1/k-1-5", target + "/k-1/k-1-6"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("delivered\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if r.Err() != nil {
		t.Fatalf("the Router failed: %v", r.Err())
	}
	for _, name := range []string{"", strings.Repeat("x", 256), "bad\x00name", "bad\xffname"} {
		if err := r.Publish(context.Background(), to(name, "k-2", 1), nil); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "exchange name") {
			t.Errorf("exchange name %.40q: Publish = %v, want a refusal naming the exchange name", name, err)
		}
	}

	if err := r.Publish(context.Background(), to(target, "unbound", 1), nil); err != nil {
		t.Fatal(err)
	}
	err = waitFailed(t, r, 10*time.Second)
	var pe *PublishError
	if !errors.As(err, &pe) || !strings.Contains(err.Error(), fmt.Sprintf("routing key %q on exchange %q", "unbound", target)) {
		t.Errorf("an unroutable message on the mapped exchange: %v, want a return naming the exchange", err)
	}
}

// TestDeletedMappedExchange: an exchange deleted after the Router found it makes RabbitMQ close the lane's
// channel with 404 once, which fails the Router as that event's refusal (issue 36: the close names the
// exchange, and the event is the lane's oldest unresolved publishing to it); the next Router checks the
// exchange again and refuses the event (ErrInvalidEvent, naming the fix) instead of failing again, so a
// restarting stream quarantines it rather than looping.
func TestDeletedMappedExchange(t *testing.T) {
	b := newBroker(t)
	gone := b.exchange + ".gone"
	t.Cleanup(func() { _ = b.admin.ExchangeDelete(gone, false, false) })
	if err := b.admin.ExchangeDeclare(gone, amqp.ExchangeFanout, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	q, err := b.admin.QueueDeclare("", false, true, true, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.admin.QueueBind(q.Name, "", gone, false, nil); err != nil {
		t.Fatal(err)
	}
	ev := func(i int) cdc.Event {
		ev := messagetest.MappedEvent()
		ev.ID = fmt.Sprintf("g-%d", i)
		ev.Mapped.ByExchange, ev.Mapped.Exchange = true, gone
		return ev
	}
	r := b.dial(b.config(""))
	c := newCounter()
	publishAll(t, r, c, ev(1))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.ExchangeDelete(gone, false, false); err != nil {
		t.Fatal(err)
	}
	_ = r.Publish(context.Background(), ev(2), nil) // found before: written, and the broker closes the channel
	err = waitFailed(t, r, 10*time.Second)
	var closed *ClosedError
	if !errors.As(err, &closed) || !closed.PerMessage() || closed.EventID != "g-2" || !closed.Attributed || closed.Missing != gone {
		t.Fatalf("publishing to the deleted exchange: %v, want a ClosedError that is g-2's refusal", err)
	}
	r2 := b.dial(b.config(""))
	if err := r2.Publish(context.Background(), ev(2), nil); !errors.Is(err, ErrInvalidEvent) || !strings.Contains(err.Error(), "declare exchange") {
		t.Errorf("the next Router: Publish = %v, want ErrInvalidEvent naming the fix", err)
	}
	if r2.Err() != nil {
		t.Errorf("the next Router failed: %v", r2.Err())
	}
}

// TestMappedHeaderTypesReachTheBroker: the int16 (int2 column) and byte array (bytea column) header values
// a mapping produces pass the frame check, are accepted by RabbitMQ and arrive with their types; a routing
// key of a bytea key's bytes (amqp.routing.key.source=key), not UTF-8, is routed as well.
func TestMappedHeaderTypesReachTheBroker(t *testing.T) {
	b := newBroker(t)
	r := b.dial(b.config(""))
	q := b.queue("#", nil)
	ev := messagetest.MappedEvent()
	ev.Mapped.Headers = append(ev.Mapped.Headers, cdc.Header{Name: "key", Value: []byte{0, 0xff}}, cdc.Header{Name: "n", Value: int16(-2)})
	ev.Mapped.RoutingKey = "\x00\xff.k"
	publishAll(t, r, newCounter(), ev)
	d := b.consume(q, 1, 10*time.Second)[0]
	if d.RoutingKey != "\x00\xff.k" {
		t.Errorf("routing key %q", d.RoutingKey)
	}
	if k, ok := d.Headers["key"].([]byte); !ok || string(k) != "\x00\xff" || d.Headers["n"] != int16(-2) {
		t.Errorf("headers key %#v n %#v, want the bytes 00ff and int16 -2", d.Headers["key"], d.Headers["n"])
	}
}

// TestMappedExchangeLoggedOncePerDialer: the first event to an exchange of amqp.topic.target=exchange logs
// that exchange at INFO once, and not again from a later Router of the same Dialer (a restarted stream), nor
// for a second event; another exchange gets its own line.
func TestMappedExchangeLoggedOncePerDialer(t *testing.T) {
	b := newBroker(t)
	first, second := b.exchange+".first", b.exchange+".second"
	for _, name := range []string{first, second} {
		if err := b.admin.ExchangeDeclare(name, amqp.ExchangeFanout, false, true, false, false, nil); err != nil {
			t.Fatal(err)
		}
		q, err := b.admin.QueueDeclare("", false, true, true, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.admin.QueueBind(q.Name, "", name, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = b.admin.ExchangeDelete(first, false, false)
		_ = b.admin.ExchangeDelete(second, false, false)
	})
	d := NewDialer(b.config(""), slog.New(slog.NewTextHandler(b.logs, nil)))
	to := func(exchange string, i int) (ev cdc.Event) {
		ev = messagetest.MappedEvent()
		ev.ID, ev.AggregateID = fmt.Sprintf("%s-%d", exchange, i), "k"
		ev.Mapped.ByExchange, ev.Mapped.Exchange = true, exchange
		return ev
	}
	c := newCounter()
	for round := range 2 {
		r, err := d.Dial(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		publishAll(t, r, c, to(first, 2*round), to(first, 2*round+1))
		if round == 1 {
			publishAll(t, r, c, to(second, 0))
		}
		r.Close()
	}
	line := "publishing to an exchange a topic names (amqp.topic.target=exchange): it exists"
	for _, name := range []string{first, second} {
		if n := strings.Count(b.logs.String(), `msg="`+line+`" exchange=`+name+"\n"); n != 1 {
			t.Errorf("exchange %s logged %d times, want once:\n%s", name, n, b.logs)
		}
	}
}
