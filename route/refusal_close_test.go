package route

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/route/message/messagetest"
)

// Refusals that close the channel (issue 36, finding 4): RabbitMQ closes a lane's channel when a mapped
// event (amqp.topic.target=exchange) is published to an internal exchange (403), to an exchange its user
// may not write (403, a permission revoked after the router's passive check included) or to one deleted
// after that check (404). Each is that event's refusal: a per-message error naming the event whose publish
// was refused (not an innocent one in flight before it, whose confirm the close took), so that the caller's
// safety net retries it alone and quarantines it with the broker's words instead of restarting forever.

// mappedTo is a mapped event of aggregate id routed to exchange x with routing key key.
func mappedTo(id, x, key string) cdc.Event {
	ev := messagetest.MappedEvent()
	ev.ID, ev.AggregateID = id, id
	ev.Mapped.ByExchange, ev.Mapped.Exchange, ev.Mapped.RoutingKey = true, x, key
	return ev
}

// closedBy publishes before, then bad, then after, with the connection paused so that they are written in
// one burst and the broker handles them in that order; bad's exchange was found by the passive check
// first. It returns the Router's error and the ids whose done was called.
func closedBy(t *testing.T, r *Router, p *testenv.Proxy, before []cdc.Event, bad cdc.Event, after ...cdc.Event) (error, *counter) {
	t.Helper()
	if _, err := r.exchange(bad); err != nil {
		t.Fatalf("passive check of %q: %v", bad.Mapped.Exchange, err)
	}
	c := newCounter()
	p.Pause()
	publishAll(t, r, c, before...)
	publishAll(t, r, c, bad)
	publishAll(t, r, c, after...)
	time.Sleep(100 * time.Millisecond) // the lane writes them, corked, to the paused socket
	p.Resume()
	return waitFailed(t, r, 10*time.Second), c
}

// wantRefusalOf checks that err is bad's per-message refusal (the broker's words, the event, whether the
// broker's state may end it) and that none of the innocent events in flight before it is named.
func wantRefusalOf(t *testing.T, err error, bad cdc.Event, state bool, words ...string) *ClosedError {
	t.Helper()
	var ce *ClosedError
	if !errors.As(err, &ce) || ce.Connection || !cdc.PerMessage(err) || cdc.BrokerState(err) != state {
		t.Fatalf("Err = %v (per message %v, broker state %v), want a channel close that is %s's refusal (broker state %v)",
			err, cdc.PerMessage(err), cdc.BrokerState(err), bad.ID, state)
	}
	if ce.EventID != bad.ID || !strings.Contains(err.Error(), "refusing the publish of event "+bad.ID) {
		t.Errorf("Err = %v names event %q, want the refused %s", err, ce.EventID, bad.ID)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Err = %v, want it to contain %q", err, w)
		}
	}
	t.Logf("%v", err)
	return ce
}

// TestInternalExchangeIsThatEventsRefusal: amq.rabbitmq.trace exists in every vhost and is internal; the
// passive check finds it, and RabbitMQ closes the channel with 403 "cannot publish to internal exchange"
// on the publish. That used to be a plain restart, forever (44 restarts in 11 minutes, every later row
// waiting). Now it is the event's refusal, which waiting does not end (quarantined after the strikes, not
// after --refusal-retry); the events of other aggregates written before it were not refused.
func TestInternalExchangeIsThatEventsRefusal(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes = 1
	r := b.dial(cfg)
	b.queue("#", nil)
	var before []cdc.Event
	for i := range 5 {
		before = append(before, event("order", fmt.Sprint(i), 1))
	}
	bad := mappedTo("traced", "amq.rabbitmq.trace", "k")
	err, _ := closedBy(t, r, p, before, bad, event("order", "after", 1))
	wantRefusalOf(t, err, bad, false, "403", "cannot publish to internal exchange 'amq.rabbitmq.trace'", "is internal",
		"replay the quarantined event")
}

// ownVhost makes a vhost of the test's own with a user of its own with every permission on it, both
// deleted at cleanup, and returns the user's URL and setWrite, which sets the user's write pattern. The
// shared broker's guest user and "/" vhost are left alone.
func ownVhost(t *testing.T) (url string, setWrite func(pattern string)) {
	t.Helper()
	vhost, user := testenv.Name(t), testenv.Name(t)
	run := func(args ...string) {
		t.Helper()
		if out, err := testenv.Rabbitmqctl(t, args...).CombinedOutput(); err != nil {
			t.Fatalf("rabbitmqctl %s: %v\n%s", args[0], err, out)
		}
	}
	run("add_vhost", vhost)
	t.Cleanup(func() { _ = testenv.Rabbitmqctl(t, "delete_vhost", vhost).Run() })
	run("add_user", user, user)
	t.Cleanup(func() { _ = testenv.Rabbitmqctl(t, "delete_user", user).Run() })
	setWrite = func(pattern string) { run("set_permissions", "-p", vhost, user, ".*", pattern, ".*") }
	setWrite(".*")
	uri, err := amqp.ParseURI(testenv.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	uri.Username, uri.Password, uri.Vhost = user, user, vhost
	return uri.String(), setWrite
}

// TestWriteRevokedAfterTheCheckIsThatEventsRefusal: in a vhost of its own, the router's user may write to
// exchange tgt when the passive check finds it; then its write permission on tgt is revoked, and the
// publish gets 403 ACCESS_REFUSED. It is the event's refusal, one the broker's state may end (the
// permission may be granted again), so it is retried for --refusal-retry; it names the permission.
// (RabbitMQ caches a channel's write permission on an exchange once it published there, so a revocation
// reaches a lane whose channel had not yet published to it, and every lane after the caller's restart.)
func TestWriteRevokedAfterTheCheckIsThatEventsRefusal(t *testing.T) {
	url, setWrite := ownVhost(t)
	b := newBroker(t)
	b.url = url
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if b.admin, err = conn.Channel(); err != nil {
		t.Fatal(err)
	}
	const tgt = "tgt"
	if err := b.admin.ExchangeDeclare(tgt, amqp.ExchangeDirect, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes = 1
	r := b.dial(cfg)
	b.queue("#", nil)
	bad := mappedTo("revoked", tgt, "k")
	if _, err := r.exchange(bad); err != nil {
		t.Fatal(err)
	}
	setWrite("^(?!tgt$).*")
	var before []cdc.Event
	for i := range 5 {
		before = append(before, event("order", fmt.Sprint(i), 1))
	}
	err, _ = closedBy(t, r, p, before, bad)
	wantRefusalOf(t, err, bad, true, "403", "access to exchange 'tgt'", "set_permissions")

	// A topic permission that refuses one routing key of the Router's own (topic) exchange refuses the
	// events of that key only: order.bad, not order.changed. Same vhost and user, a new Router.
	uri, err := amqp.ParseURI(url)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := testenv.Rabbitmqctl(t, "set_topic_permissions", "-p", uri.Vhost, uri.Username, b.exchange,
		`^order\.(?!bad$).*`, ".*").CombinedOutput(); err != nil {
		t.Fatalf("set_topic_permissions: %v\n%s", err, out)
	}
	r = b.dial(cfg)
	topic := event("order", "topic", 1)
	topic.EventType = "bad"
	c := newCounter()
	p.Pause()
	publishAll(t, r, c, before...)
	publishAll(t, r, c, topic)
	time.Sleep(100 * time.Millisecond)
	p.Resume()
	err = waitFailed(t, r, 10*time.Second)
	wantRefusalOf(t, err, topic, true, "403", "access to topic 'order.bad'", "set_topic_permissions")
}

// TestExchangeDeletedAfterTheCheckIsThatEventsRefusal: the exchange of a mapped event is deleted after the
// passive check found it; the publish gets 404 NOT_FOUND, which is the event's refusal (the next Router
// checks the exchange again and refuses the event at once while it is missing), never a plain restart.
func TestExchangeDeletedAfterTheCheckIsThatEventsRefusal(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes = 1
	r := b.dial(cfg)
	b.queue("#", nil)
	target := b.exchange + ".gone"
	if err := b.admin.ExchangeDeclare(target, amqp.ExchangeDirect, false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	bad := mappedTo("gone", target, "k")
	if _, err := r.exchange(bad); err != nil {
		t.Fatal(err)
	}
	if err := b.admin.ExchangeDelete(target, false, false); err != nil {
		t.Fatal(err)
	}
	err, _ := closedBy(t, r, p, []cdc.Event{event("order", "1", 1), event("order", "2", 1)}, bad)
	wantRefusalOf(t, err, bad, true, "404", "no exchange '"+target+"'", "declare exchange")
}

// TestLastingRefusalDoesNotRepublishTheWindow (issue 36, finding 5): with AggregateWindow 4, v1 is nacked
// (its routing key is bound to a queue that is full: x-max-length 0, reject-publish) while v2 to v4 were
// written behind it and delivered. The caller retries as the stream does: a new Router of the same Dialer,
// every unacknowledged event again from v1. Each retry used to write v2 to v4 again behind the refused v1
// (delivered once per retry, out of order again); now a Router of the Dialer lets the refused aggregate have
// one unconfirmed event until one of its events is confirmed, so v2 to v4 reach the queue once before the
// refusal and once after it ends, however many retries it lasts, and in order that second time.
func TestLastingRefusalDoesNotRepublishTheWindow(t *testing.T) {
	b := newBroker(t)
	p := b.proxy()
	cfg := b.config(b.viaProxy(p))
	cfg.Lanes, cfg.AggregateWindow = 1, 4
	d := NewDialer(cfg, nil)
	dial := func() *Router {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := d.Dial(ctx)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		return r
	}
	first := dial() // declares the topology for the queues below
	q := b.queue("#", nil)
	full, err := b.admin.QueueDeclare("", false, true, true, false, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.admin.QueueBind(full.Name, "order.refused", b.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	var evs []cdc.Event
	for v := 1; v <= 8; v++ {
		ev := event("order", "hot", v)
		if v == 1 {
			ev.EventType = "refused"
		}
		evs = append(evs, ev)
	}
	const retries = 5
	for try := range retries {
		r := first
		if try > 0 {
			r = dial()
		}
		if try == 0 { // v1 to v4 reach the broker in one burst, before its nack of v1 can stop the lane
			publishStalled(t, r, p, newCounter(), len(evs)-cfg.AggregateWindow, evs...)
		} else {
			for _, ev := range evs {
				if r.Publish(context.Background(), ev, nil) != nil {
					break // the nack of v1 came first: the rest is not written, as after the caller's restart
				}
			}
		}
		err := waitFailed(t, r, 10*time.Second)
		var pe *PublishError
		if !errors.As(err, &pe) || pe.EventID != evs[0].ID {
			t.Fatalf("try %d: Err = %v, want the nack of v1", try, err)
		}
		closePromptly(t, r)
	}
	if err := b.admin.QueueUnbind(full.Name, "order.refused", b.exchange, nil); err != nil { // the refusal ends
		t.Fatal(err)
	}
	r := dial()
	c := newCounter()
	publishAll(t, r, c, evs...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatalf("Drain once the refusal ended: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	got := b.queued(q)
	n := map[string]int{}
	for _, id := range got {
		n[id]++
	}
	for v, ev := range evs {
		want := 1
		switch {
		case v == 0:
			want = retries + 1 // the queue that accepts v1 has it once per try: the nack is the full queue's
		case v < cfg.AggregateWindow:
			want = 2 // written behind v1 before its first nack, and again after it was confirmed
		}
		if n[ev.ID] != want {
			t.Errorf("v%d delivered %d times over %d refused tries and the last, want %d", v+1, n[ev.ID], retries, want)
		}
	}
	if last := got[len(got)-len(evs):]; fmt.Sprint(last) != fmt.Sprint(ids(evs)) {
		t.Errorf("the last try delivered %q, want v1 to v8 in order", last)
	}
	if k := d.refused.len(); k != 0 {
		t.Errorf("the Dialer still remembers %d refused aggregates after their events were confirmed", k)
	}
	t.Logf("deliveries in queue order: %q", got)
}

// ids is the event ids of evs.
func ids(evs []cdc.Event) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, ev.ID)
	}
	return out
}

// TestRefusalNamingAnExchangeIsPerMessageOnlyOnALane: the broker's texts of a refused publish are one
// event's refusal only on a lane's channel and for an exchange other than the Router's own: a connection
// closed with them stays a restart, and the Router's own exchange concerns every event (it is declared
// again by the next Router, or its permission must be granted).
func TestRefusalNamingAnExchangeIsPerMessageOnlyOnALane(t *testing.T) {
	internal := &amqp.Error{Code: 403, Server: true, Reason: "ACCESS_REFUSED - cannot publish to internal exchange 'it''s' in vhost 'v'"}
	missing := &amqp.Error{Code: 404, Server: true, Reason: "NOT_FOUND - no exchange 'gone' in vhost 'v'"}
	for _, c := range []struct {
		name       string
		e          *amqp.Error
		connection bool
		own        string
		per, state bool
		x          string
	}{
		{"internal, lane", internal, false, "cdc", true, false, "it's"},
		{"internal, connection", internal, true, "cdc", false, false, ""},
		{"internal, own exchange", internal, false, "it's", false, false, ""},
		{"missing, lane", missing, false, "cdc", true, true, "gone"},
		{"missing, connection", missing, true, "cdc", false, false, ""},
		{"missing, own exchange", missing, false, "gone", false, false, ""},
	} {
		ce := closedError(c.e, c.connection, 0, "e-1", c.own)
		if x, _ := ce.refusedExchange(); ce.PerMessage() != c.per || ce.BrokerState() != c.state || x != c.x {
			t.Errorf("%s: PerMessage %v, BrokerState %v, exchange %q; want %v, %v, %q", c.name, ce.PerMessage(), ce.BrokerState(),
				x, c.per, c.state, c.x)
		}
	}
}
