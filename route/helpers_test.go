package route

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// logBuffer collects the router's log lines; tests check that no password ever reaches it.
type logBuffer = testenv.Buffer

// broker is one test's view of the shared RabbitMQ: its own exchange name, an admin channel on a
// connection of its own, and cleanup of everything it declared.
type broker struct {
	t        testing.TB
	url      string
	exchange string
	admin    *amqp.Channel
	logs     *logBuffer
}

func newBroker(t testing.TB) *broker {
	t.Helper()
	url := testenv.AMQPURL(t)
	b := &broker{t: t, url: url, exchange: testenv.Name(t), logs: &logBuffer{}}
	conn, err := amqp.Dial(url)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	t.Cleanup(func() {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(b.exchange, false, false)
			_ = ch.ExchangeDelete(b.exchange+UnroutableSuffix, false, false)
			_, _ = ch.QueueDelete(b.exchange+UnroutableSuffix, false, false, false)
		}
		conn.Close()
		if strings.Contains(b.logs.String(), "guest@") || strings.Contains(b.logs.String(), "s3cret") {
			t.Errorf("a password reached the log:\n%s", b.logs)
		}
	})
	if b.admin, err = conn.Channel(); err != nil {
		t.Fatalf("admin channel: %v", err)
	}
	return b
}

// config is a Config for this test's exchange; url "" means the broker itself.
func (b *broker) config(url string) Config {
	if url == "" {
		url = b.url
	}
	return Config{URL: url, Exchange: b.exchange, ConnectionName: "route-test " + b.t.Name()}
}

// dial starts a Router and closes it at cleanup.
func (b *broker) dial(cfg Config) *Router {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := Dial(ctx, cfg, slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		b.t.Fatalf("Dial: %v", err)
	}
	b.t.Cleanup(func() { r.Close() })
	return r
}

// queue declares an exclusive queue (gone with the admin connection) bound to the exchange with key.
func (b *broker) queue(key string, args amqp.Table) string {
	b.t.Helper()
	q, err := b.admin.QueueDeclare("", false, true, true, false, args)
	if err != nil {
		b.t.Fatalf("declare queue: %v", err)
	}
	if err := b.admin.QueueBind(q.Name, key, b.exchange, false, nil); err != nil {
		b.t.Fatalf("bind queue: %v", err)
	}
	return q.Name
}

// consume reads n messages from queue, failing the test after timeout.
func (b *broker) consume(queue string, n int, timeout time.Duration) []amqp.Delivery {
	b.t.Helper()
	ds, err := b.admin.Consume(queue, "", true, true, false, false, nil)
	if err != nil {
		b.t.Fatalf("consume: %v", err)
	}
	out := make([]amqp.Delivery, 0, n)
	deadline := time.After(timeout)
	for len(out) < n {
		select {
		case d := <-ds:
			out = append(out, d)
		case <-deadline:
			b.t.Fatalf("consumed %d of %d messages within %s", len(out), n, timeout)
		}
	}
	return out
}

// event is the i-th event of an aggregate.
func event(aggType, aggID string, i int) cdc.Event {
	return cdc.Event{
		ID:               fmt.Sprintf("%s-%s-%06d", aggType, aggID, i),
		AggregateType:    aggType,
		AggregateID:      aggID,
		AggregateVersion: int64(i),
		EventType:        "changed",
		SchemaVersion:    1,
		Payload:          fmt.Appendf(nil, `{"n":%d}`, i),
		Headers:          []byte(`{"trace":"t-` + aggID + `","attempt":1}`),
		OccurredAt:       time.Unix(1700000000+int64(i), 0).UTC(),
		CommitLSN:        cdc.LSN(0x100000000 + i),
	}
}

// counter counts done calls per event id.
type counter struct {
	mu sync.Mutex
	n  map[string]int
	t  atomic.Int64
}

func newCounter() *counter { return &counter{n: map[string]int{}} }

func (c *counter) done(id string) func() {
	return func() {
		c.mu.Lock()
		c.n[id]++
		c.mu.Unlock()
		c.t.Add(1)
	}
}

func (c *counter) count(id string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[id]
}

// waitFailed waits for the router to fail within d.
func waitFailed(t testing.TB, r *Router, d time.Duration) error {
	t.Helper()
	select {
	case <-r.Failed():
		return r.Err()
	case <-time.After(d):
		t.Fatalf("router did not fail within %s", d)
		return nil
	}
}

// viaProxy is the broker URL with the host and port of a proxy in front of it.
func (b *broker) viaProxy(p *testenv.Proxy) string {
	u, err := amqp.ParseURI(b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	host, port, _ := net.SplitHostPort(p.Addr)
	u.Host = host
	u.Port, _ = strconv.Atoi(port)
	return u.String()
}

// proxy is a TCP proxy in front of the broker.
func (b *broker) proxy() *testenv.Proxy {
	u, err := amqp.ParseURI(b.url)
	if err != nil {
		b.t.Fatal(err)
	}
	return testenv.NewProxy(b.t, net.JoinHostPort(u.Host, strconv.Itoa(u.Port)))
}

// publishAll publishes the events in order, counting their done calls in c.
func publishAll(t testing.TB, r *Router, c *counter, evs ...cdc.Event) {
	t.Helper()
	for _, ev := range evs {
		if err := r.Publish(context.Background(), ev, c.done(ev.ID)); err != nil {
			t.Fatalf("Publish %s: %v", ev.ID, err)
		}
	}
}
