package runner_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// closeConnection closes, from the broker, the connection whose connection_name is name (rabbitmqctl close_connection
// takes the connection's Erlang pid).
func closeConnection(t *testing.T, name string) {
	t.Helper()
	out, err := testenv.Rabbitmqctl(t, "-q", "list_connections", "--no-table-headers", "pid", "client_properties").Output()
	if err != nil {
		t.Fatalf("rabbitmqctl list_connections: %v", err)
	}
	for line := range strings.Lines(string(out)) {
		conn, props, ok := strings.Cut(strings.TrimSpace(line), "\t")
		if ok && strings.Contains(props, `{"connection_name","`+name+`"}`) {
			if out, err := testenv.Rabbitmqctl(t, "-q", "close_connection", conn, "closed by the test").CombinedOutput(); err != nil {
				t.Fatalf("rabbitmqctl close_connection: %v: %s", err, out)
			}
			return
		}
	}
	t.Fatalf("no connection named %q in:\n%s", name, out)
}

// The runner's connection is closed by the broker mid-stream, then cut by the network (a TCP proxy), each
// time while its handlers are in flight: the runner reconnects each time and logs the broker's reason; at
// the end every event was applied exactly once.
func TestRunnerReconnectLosesNothingAndAppliesNothingTwice(t *testing.T) {
	l := newRunnerLab(t)
	proxy := testenv.NewProxy(t, testenv.AMQPAddr(t))
	msgs, events := orderStream(11, 60, 50, 10)
	l.publishAll(msgs)
	// Each fault is made while the handlers wait at a gate, inside their transactions: so it lands
	// mid-stream however long rabbitmqctl takes on a loaded machine (in a CI run the whole stream could
	// be applied before the close, and the test then waited for progress that could not come), and the
	// handlers in flight commit after their channel is gone.
	var gate atomic.Pointer[chan struct{}]
	hold := func() (release func()) {
		ch := make(chan struct{})
		gate.Store(&ch)
		return func() { gate.Store(nil); close(ch) }
	}
	l.wrap = func(ctx context.Context, tx pgx.Tx, ev inbox.Event, next inbox.Handler) error {
		if g := gate.Load(); g != nil {
			select {
			case <-*g:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		time.Sleep(5 * time.Millisecond)
		return next(ctx, tx, ev)
	}
	cfg := l.config(4)
	cfg.URLs = []string{"amqp://guest:guest@" + proxy.Addr + "/"}
	cfg.ConnectionName = "test " + l.consumer
	stop := l.start(l.processor(inbox.Config{}), cfg)
	applied := func() int64 { return l.Count(`SELECT count(*) FROM applied_log`) }

	l.waitFor("a fifth applied", 30*time.Second, func() bool { return applied() >= int64(len(events)/5) })
	release := hold()
	closeConnection(t, cfg.ConnectionName)
	atClose := applied()
	l.waitFor("the broker's reason logged", 10*time.Second, func() bool { return l.logs.contains("CONNECTION_FORCED") })
	connections := func() int { return strings.Count(l.logs.String(), "inbox runner connected") }
	l.waitFor("a reconnect", 30*time.Second, func() bool { return connections() >= 2 })
	release()
	l.waitFor("progress after the reconnect", 30*time.Second, func() bool { return applied() > atClose+100 })
	release = hold()
	proxy.Cut()
	atCut := applied()
	l.waitFor("a second reconnect", 30*time.Second, func() bool { return connections() >= 3 })
	release()
	l.waitFor("every event applied", time.Minute, func() bool { return applied() >= int64(len(events)) })
	l.waitFor("every delivery settled", 30*time.Second, func() bool { return l.queueMessages() == 0 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	want(t, "applications", applied(), int64(len(events)))
	want(t, "distinct events applied", l.Count(`SELECT count(DISTINCT event_id) FROM applied_log`), int64(len(events)))
	want(t, "aggregates at the last version", l.Count(`SELECT count(*) FROM projection WHERE version = 50`), 60)
	want(t, "connections", connections(), 3)
	for line := range strings.Lines(l.logs.String()) {
		if strings.Contains(line, "level=WARN") {
			t.Log(strings.TrimSpace(line))
		}
	}
	if atCut >= int64(len(events)) {
		t.Errorf("the cut came after the last event: it tested nothing")
	}
	summary(t, "events=%d deliveries=%d; broker closed the connection at %d applied, proxy cut at %d; "+
		"redeliveries=%v duplicates=%v parked=%v; applied once each",
		len(events), len(msgs), atClose, atCut, metric(t, l.reg, "cdc_router_inbox_redeliveries_total"),
		metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "duplicate"),
		metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "parked"))
}
