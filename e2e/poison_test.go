package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// insertHeaders inserts one outbox row with the given aggregate id and headers (SQL expressions) and
// returns its id.
func (e *env) insertHeaders(aggID, headers string) string {
	e.t.Helper()
	id := uuid()
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES ($1, 'order', `+aggID+`, 1, 'created', '{"n": 1}', `+headers+`)`, id)
	return id
}

// quarantinedIDs is the set of event ids in the quarantine table, with their reasons.
func (e *env) quarantinedIDs() map[string]string {
	e.t.Helper()
	rows, err := e.db.Query(context.Background(), `SELECT coalesce(event_id, ''), reason FROM cdc_router.quarantine`)
	if err != nil {
		e.t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var id, reason string
		if err := rows.Scan(&id, &reason); err != nil {
			e.t.Fatal(err)
		}
		out[id] = reason
	}
	return out
}

// waitQuarantined waits until n quarantine records exist.
func (e *env) waitQuarantined(n int, timeout time.Duration) map[string]string {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		got := e.quarantinedIDs()
		if len(got) >= n || time.Now().After(deadline) {
			if len(got) != n {
				e.t.Fatalf("%d quarantine records, want %d: %v", len(got), n, got)
			}
			return got
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestHeadersTheBrokerWouldRefuseAreQuarantined: each of these rows used to make RabbitMQ close the
// channel (406) or the connection (501, frame_max) and the stream republished it forever; a well-typed CC
// was silently routed to another routing key. Each is now quarantined before it is published, and the
// stream goes on without a restart.
func TestHeadersTheBrokerWouldRefuseAreQuarantined(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	bad := map[string]string{
		e.insertHeaders("'cc-string'", `'{"CC": "x"}'`):                                                              "CC",
		e.insertHeaders("'cc-array'", `'{"CC": ["other.key"]}'`):                                                     "CC",
		e.insertHeaders("'bcc-array'", `'{"BCC": ["other.key"]}'`):                                                   "BCC",
		e.insertHeaders("'many-keys'", `(SELECT jsonb_object_agg('key-' || i, i) FROM generate_series(1, 10000) i)`): "frame",
		e.insertHeaders("repeat('a', 200000)", `'{}'`):                                                               "frame",
	}
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	got := c.waitFor(t, w.rows, 30*time.Second)
	q := e.waitQuarantined(len(bad), 10*time.Second)
	for id, want := range bad {
		if !strings.Contains(q[id], want) {
			t.Errorf("quarantine reason of the %s row: %q", want, q[id])
		}
	}
	for _, d := range got {
		if _, ok := bad[d.id]; ok {
			t.Errorf("event %s was published", d.id)
		}
	}
	if strings.Contains(r.Output(), "restarting") {
		t.Errorf("the stream restarted:\n%s", tail(r.Output(), 20))
	}
}

// TestBackfillQuarantinesReservedHeaders: backfill publishes through the same checks.
func TestBackfillQuarantinesReservedHeaders(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.startStreaming()
	bcc := e.insertHeaders("'bcc'", `'{"BCC": ["x"]}'`)
	w := newWriter(t, e.pgURL, 3)
	w.write(10, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	e.waitQuarantined(1, 10*time.Second)
	out, code := e.cli("backfill", "--where", "true", "--exchange", e.exchange, "--name", "all")
	if code != 0 {
		t.Fatalf("backfill: exit %d\n%s", code, out)
	}
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.quarantine WHERE event_id = $1 AND slot = 'backfill:all'`, bcc); n != "1" {
		t.Errorf("backfill quarantined the BCC row %s times, want once", n)
	}
	backfilled := 0
	for _, d := range c.snapshot() {
		if d.msg.Headers["x-backfill"] == true {
			backfilled++
		}
	}
	if backfilled < len(w.rows) {
		t.Errorf("backfill published %d rows, want the %d good ones", backfilled, len(w.rows))
	}
}

// TestBrokerRefusalOfOneMessageIsQuarantined: the safety net. A message over the broker's max_message_size
// (which the router cannot know) makes RabbitMQ close the channel with 406 each time it is published. The
// router finds it by publishing one event at a time, quarantines it after three refusals in a row with the
// broker's words, and every other event arrives in order. max_message_size is a broker-wide setting, so
// the test sets it on a RabbitMQ node of its own (RabbitMQ 3.x reads it from the application's
// environment, 4.x from a persistent term set at boot: both are set).
func TestBrokerRefusalOfOneMessageIsQuarantined(t *testing.T) {
	node := testenv.StartRabbitMQNode(t)
	node.Ctl("eval", fmt.Sprintf("application:set_env(rabbit, max_message_size, %d), persistent_term:put(max_message_size, %d).", 64<<10, 64<<10))
	e := newStreamEnvOn(t, node)
	c := e.consume(e.queue)
	r := e.startStreaming()
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	var big string
	if err := e.db.QueryRow(context.Background(), `INSERT INTO outbox (id, aggregate_type, aggregate_id,
		aggregate_version, event_type, payload) VALUES (gen_random_uuid(), 'order', 'big', 1, 'created',
		jsonb_build_object('x', repeat('x', 100000))) RETURNING id::text`).Scan(&big); err != nil {
		t.Fatal(err)
	}
	w.write(20, 5, 0)
	got := c.waitFor(t, w.rows, 90*time.Second)
	checkOrder(t, got)
	q := e.waitQuarantined(1, 10*time.Second)
	if reason := q[big]; !strings.Contains(reason, "406") || !strings.Contains(reason, "3 times") {
		t.Errorf("quarantine reason %q, want the broker's 406 and the count", reason)
	}
	t.Logf("quarantined after %d stream restarts: %s", strings.Count(r.Output(), "restarting"), q[big])
	if strings.Contains(r.Output(), "xxxxxxxxxx") {
		t.Error("the log carries the payload")
	}
}

// TestTransientRefusalsNeverQuarantine: a queue that rejects every publish (x-overflow=reject-publish) makes
// the broker nack; the router retries with backoff, quarantines nothing within --refusal-retry (default 5
// minutes) and holds the position, and the event goes out once the queue is gone.
func TestTransientRefusalsNeverQuarantine(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	ch := e.channel()
	full := e.queue + "_full"
	if _, err := ch.QueueDeclare(full, true, true, false, false, amqp.Table{"x-max-length": int32(0), "x-overflow": "reject-publish"}); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(full, "#", e.exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	r := e.startStreaming()
	id := e.insertOne("outbox", "nacked")
	deadline := time.Now().Add(20 * time.Second)
	for strings.Count(r.Output(), "restarting") < 4 && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
	}
	if n := strings.Count(r.Output(), "restarting"); n < 4 {
		t.Fatalf("%d restarts after nacks, want at least 4:\n%s", n, tail(r.Output(), 20))
	}
	if !strings.Contains(r.Output(), "nacked by the broker") {
		t.Fatalf("the restarts were not caused by nacks:\n%s", tail(r.Output(), 20))
	}
	if n := e.quarantined(); n != "0" {
		t.Fatalf("%s rows quarantined for nacks, want none", n)
	}
	if _, err := e.channel().QueueDelete(full, false, false, false); err != nil {
		t.Fatal(err)
	}
	c.waitFor(t, []row{{id: id}}, 60*time.Second)
}
