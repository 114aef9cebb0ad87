package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// mappedEnv is a test world with an outbox table of another shape (created by ddl as public.<table>), a
// publication of its own made by `migrate`, the exchange declared and the test queue bound to "#".
func mappedEnv(t *testing.T, table, ddl string) *env {
	t.Helper()
	e := newStreamEnv(t)
	e.exec(ddl)
	if out, code := e.cli("migrate", "--table", "public."+table, "--publication", table+"_pub"); code != 0 {
		t.Fatalf("migrate for %s: exit %d: %s", table, code, out)
	}
	return e
}

// writeConfig writes a mapping file and returns its path.
func writeConfig(t *testing.T, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "outbox.properties")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startMapped starts the router on public.<table> with the mapping file and waits until it streams.
func (e *env) startMapped(table, config string, flags ...string) *router {
	e.t.Helper()
	return e.startStreaming(append([]string{"--table", "public." + table, "--publication", table + "_pub", "--config", config,
		"--snapshot", "never"}, flags...)...)
}

// deliveriesByID waits for n deliveries on the test queue and returns them by message id.
func (e *env) deliveriesByID(c *consumer, n int) map[string]amqp.Delivery {
	e.t.Helper()
	return e.deliveriesByIDWithin(c, n, 30*time.Second)
}

// deliveriesByIDWithin is deliveriesByID with its own timeout.
func (e *env) deliveriesByIDWithin(c *consumer, n int, timeout time.Duration) map[string]amqp.Delivery {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for len(c.snapshot()) < n && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	got := map[string]amqp.Delivery{}
	for _, d := range c.snapshot() {
		got[d.msg.MessageId] = d.msg
	}
	if len(got) != n {
		e.t.Fatalf("%d distinct messages, want %d", len(got), n)
	}
	return got
}

const debeziumTable = `CREATE TABLE dbz_outbox (
	id uuid PRIMARY KEY,
	aggregatetype varchar(255) NOT NULL,
	aggregateid varchar(255) NOT NULL,
	type varchar(255) NOT NULL,
	payload jsonb,
	created_at timestamptz NOT NULL DEFAULT now(),
	tracingspancontext varchar(256))`

// TestDebeziumShapedOutbox streams a Debezium-shaped table (written as Quarkus/Spring code writes it) with a
// mapping that uses a custom routing template, a timestamp column, a header placement, tombstones and the
// tracing column, and checks every message; a NULL routing value is quarantined.
func TestDebeziumShapedOutbox(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	c := e.consume(e.queue)
	config := writeConfig(t, `# Debezium outbox router options
table.field.event.timestamp=created_at
table.fields.additional.placement=type:header:eventType
route.topic.regex=(?<routedByValue>.*)
route.topic.replacement=events.${routedByValue}
route.tombstone.on.empty.payload=true
amqp.key.header=aggregate
`)
	e.startMapped("dbz_outbox", config)
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload, created_at, tracingspancontext) VALUES
		('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'Order', 'o-1', 'OrderCreated', '{"total": 12.5}', '2025-03-04 05:06:07.891+00',
		 E'#Mon Mar 03 00:00:00 UTC 2025\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n'),
		('b1ffcd00-0d1c-4ef8-bb6d-6bb9bd380a22', 'Order', 'o-1', 'OrderDeleted', NULL, '2025-03-04 05:06:08+00', NULL)`)
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES
		('c2000000-0000-4000-8000-000000000003', 'Customer', 'c-9', 'CustomerMoved', '{"city": "Oslo"}')`)
	got := e.deliveriesByID(c, 3)

	m := got["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]
	if m.RoutingKey != "events.Order" || m.ContentType != "application/json" || string(m.Body) != `{"total": 12.5}` ||
		m.Timestamp.Unix() != time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC).Unix() || m.DeliveryMode != 2 || m.Type != "OrderCreated" {
		t.Errorf("first message: key %q content %q body %s ts %v type %q", m.RoutingKey, m.ContentType, m.Body, m.Timestamp, m.Type)
	}
	want := amqp.Table{"id": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "aggregate": "o-1", "eventType": "OrderCreated",
		"timestamp_in_ms": time.Date(2025, 3, 4, 5, 6, 7, 891e6, time.UTC).UnixMilli(),
		"traceparent":     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	for k, v := range want {
		if m.Headers[k] != v {
			t.Errorf("header %s = %#v (%T), want %#v", k, m.Headers[k], m.Headers[k], v)
		}
	}
	for _, k := range []string{"aggregate_version", "aggregate_type", "tombstone", "tracestate"} {
		if _, ok := m.Headers[k]; ok {
			t.Errorf("header %s present: %v", k, m.Headers)
		}
	}
	tomb := got["b1ffcd00-0d1c-4ef8-bb6d-6bb9bd380a22"]
	if len(tomb.Body) != 0 || tomb.Headers["tombstone"] != true || tomb.RoutingKey != "events.Order" || tomb.Headers["eventType"] != "OrderDeleted" {
		t.Errorf("tombstone: body %q headers %v key %q", tomb.Body, tomb.Headers, tomb.RoutingKey)
	}
	if d := got["c2000000-0000-4000-8000-000000000003"]; d.RoutingKey != "events.Customer" {
		t.Errorf("third message routing key %q", d.RoutingKey)
	}

	// A NULL routing value is quarantined, and the stream goes on.
	e.exec(`ALTER TABLE dbz_outbox ALTER COLUMN aggregatetype DROP NOT NULL`)
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES
		('d3000000-0000-4000-8000-000000000004', NULL, 'x', 'Lost', '{}'),
		('e4000000-0000-4000-8000-000000000005', 'Order', 'o-2', 'After', '{}')`)
	got = e.deliveriesByID(c, 4)
	if _, ok := got["e4000000-0000-4000-8000-000000000005"]; !ok {
		t.Errorf("the row after the quarantined one was not published")
	}
	reason := e.scalar(`SELECT string_agg(event_id || ': ' || reason, '; ') FROM cdc_router.quarantine`)
	if reason != "d3000000-0000-4000-8000-000000000004: aggregatetype (route.by.field) is NULL, so the event has no routing key" {
		t.Errorf("quarantine: %q", reason)
	}
}

// TestMappedSetupCheck: a mapping the table does not fit is refused at start-up, naming the option; --config
// with --shard is refused before any connection.
func TestMappedSetupCheck(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	r := e.start("", "--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--snapshot", "never",
		"--config", writeConfig(t, "table.field.event.payload=body\nroute.by.field=topic\n"))
	if code := r.wait(30 * time.Second); code == 0 {
		t.Fatalf("exit 0 for a table without the mapped columns")
	}
	out := r.Output()
	for _, s := range []string{"does not fit the --config mapping", "column body named by table.field.event.payload is missing",
		"column topic named by route.by.field is missing", "correct the option in the --config file"} {
		if !strings.Contains(out, s) {
			t.Errorf("output lacks %q:\n%s", s, tail(out, 10))
		}
	}
	out, code := e.cli("run", "--table", "public.dbz_outbox", "--config", writeConfig(t, ""), "--shard", "0/2")
	if code != 2 || !strings.Contains(out, "cannot be combined with --shard") {
		t.Errorf("with --shard: exit %d: %s", code, out)
	}
	out, code = e.cli("run", "--snapshot", "never", "--config", writeConfig(t, "table.fields.additional.placement=type:header:BCC\n"))
	if code != 2 || !strings.Contains(out, `table.fields.additional.placement: header name "BCC" is reserved by RabbitMQ`) {
		t.Errorf("reserved alias: exit %d: %s", code, out)
	}
	out, code = e.cli("run", "--snapshot", "never", "--config", writeConfig(t, "route.topic.regex=(?!x).*\n"))
	if code != 2 || !strings.Contains(out, "line 1: route.topic.regex \"(?!x).*\" uses a negative lookahead") {
		t.Errorf("bad regex: exit %d: %s", code, out)
	}
}

// TestMappedTableDrift: a column the mapping names disappears under the stream (renamed). The router stops
// before the first row written meanwhile, naming the option, and quarantines nothing; once the file names
// the new column, that row (decoded with the table definition of its time) and the later ones are published.
func TestMappedTableDrift(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	c := e.consume(e.queue)
	r := e.startMapped("dbz_outbox", writeConfig(t, ""))
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('a0000000-0000-4000-8000-000000000001', 'Order', 'o-1', 'T', '{}')`)
	e.deliveriesByID(c, 1)
	e.exec(`ALTER TABLE dbz_outbox RENAME COLUMN payload TO body`)
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, body) VALUES ('b0000000-0000-4000-8000-000000000002', 'Order', 'o-1', 'T', '{"n": 2}')`)
	r.expectExit(30*time.Second, "column payload (table.field.event.payload) is missing", "correct the option in the --config file")
	if len(c.snapshot()) != 1 {
		t.Fatalf("%d deliveries: the row written after the rename was published", len(c.snapshot()))
	}
	e.startMapped("dbz_outbox", writeConfig(t, "table.field.event.payload=body\n"))
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, body) VALUES ('c0000000-0000-4000-8000-000000000003', 'Order', 'o-1', 'T', '{"n": 3}')`)
	got := e.deliveriesByID(c, 3)
	if string(got["b0000000-0000-4000-8000-000000000002"].Body) != `{"n": 2}` || string(got["c0000000-0000-4000-8000-000000000003"].Body) != `{"n": 3}` {
		t.Errorf("after the fix: %s, %s", got["b0000000-0000-4000-8000-000000000002"].Body, got["c0000000-0000-4000-8000-000000000003"].Body)
	}
	if n := e.quarantined(); n != "0" {
		t.Errorf("%s rows quarantined, want none", n)
	}
}

// TestMappedTombstoneDrop: with amqp.tombstone=drop an empty payload publishes nothing, and the slot's
// position still moves past its transaction (a dropped row holds nothing back).
func TestMappedTombstoneDrop(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	c := e.consume(e.queue)
	e.startMapped("dbz_outbox", writeConfig(t, "route.tombstone.on.empty.payload=true\namqp.tombstone=drop\n"))
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('a0000000-0000-4000-8000-000000000001', 'Order', 'o-1', 'Deleted', NULL)`)
	after := e.scalar(`SELECT pg_current_wal_lsn()::text`)
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES ('b0000000-0000-4000-8000-000000000002', 'Order', 'o-2', 'Created', '{}')`)
	got := e.deliveriesByID(c, 1)
	if _, ok := got["b0000000-0000-4000-8000-000000000002"]; !ok {
		t.Fatalf("the row after the tombstone was not published: %v", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for e.scalar(`SELECT (confirmed_flush_lsn >= $1::pg_lsn)::text FROM pg_replication_slots WHERE slot_name = $2`, after, e.slot) != "true" {
		if time.Now().After(deadline) {
			t.Fatalf("the slot's confirmed_flush_lsn %s did not pass the dropped tombstone's transaction (%s)",
				e.scalar(`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot), after)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := e.quarantined(); n != "0" {
		t.Errorf("%s rows quarantined, want none", n)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(c.snapshot()); n != 1 {
		t.Errorf("%d deliveries, want 1 (the tombstone dropped)", n)
	}
}
