package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// recipe returns the SQL table and the mapping file of a recipe in docs/migrating-from-polling.md or a
// docs/howto/adopt-*.md page: the properties block starting with "# recipe: <name>" and the sql block just
// before it; the table's name as PostgreSQL stores it (the guide may quote a mixed-case one). The tests run
// what the guide shows.
func recipe(t *testing.T, name string) (table, ddl, config string) {
	t.Helper()
	pages, _ := filepath.Glob("../docs/howto/adopt-*.md")
	var s string
	for _, page := range append([]string{"../docs/migrating-from-polling.md"}, pages...) {
		doc, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		s += string(doc) + "\n"
	}
	at := strings.Index(s, "```properties\n# recipe: "+name+"\n")
	if at < 0 {
		t.Fatalf("the guide has no recipe %s", name)
	}
	config = s[at+len("```properties\n"):]
	config = config[:strings.Index(config, "```")]
	sqlAt := strings.LastIndex(s[:at], "```sql\n")
	ddl = s[sqlAt+len("```sql\n"):]
	ddl = ddl[:strings.Index(ddl, "```")]
	table = regexp.MustCompile(`CREATE TABLE "?(\w+)"?`).FindStringSubmatch(ddl)[1]
	return table, ddl, writeConfig(t, config)
}

func checkHeaders(t *testing.T, what string, got, want amqp.Table) {
	t.Helper()
	for k, v := range want {
		if g := got[k]; !(g == v || bytesEqual(g, v)) {
			t.Errorf("%s: header %s = %#v (%T), want %#v (%T)", what, k, g, g, v, v)
		}
	}
}

func bytesEqual(a, b any) bool {
	x, ok1 := a.([]byte)
	y, ok2 := b.([]byte)
	return ok1 && ok2 && bytes.Equal(x, y)
}

// TestRecipeDebeziumJSONB: Debezium's convention with a jsonb payload, written as Quarkus'
// debezium-quarkus-outbox writes it (insert, then delete the row in the same transaction).
func TestRecipeDebeziumJSONB(t *testing.T) {
	table, ddl, config := recipe(t, "debezium-jsonb")
	e := mappedEnv(t, table, ddl)
	c := e.consume(e.queue)
	e.startMapped(table, config)
	ctx := context.Background()
	for _, row := range [][]string{
		{"a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "Order", "o-1", "OrderCreated", `{"id": "o-1", "total": 12.5}`},
		{"b1ffcd00-0d1c-4ef8-bb6d-6bb9bd380a22", "Customer", "c-7", "CustomerMoved", `{"city": "Oslo"}`},
	} {
		tx, err := e.db.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, $4, $5)`,
			row[0], row[1], row[2], row[3], row[4]); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM outboxevent WHERE id = $1`, row[0]); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got := e.deliveriesByID(c, 2)
	m := got["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]
	if m.RoutingKey != "outbox.event.Order" || m.Type != "OrderCreated" || m.ContentType != "application/json" ||
		string(m.Body) != `{"id": "o-1", "total": 12.5}` || m.Timestamp.IsZero() {
		t.Errorf("Order: key %q type %q content %q body %s ts %v", m.RoutingKey, m.Type, m.ContentType, m.Body, m.Timestamp)
	}
	checkHeaders(t, "Order", m.Headers, amqp.Table{"id": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "key": "o-1", "eventType": "OrderCreated"})
	if m := got["b1ffcd00-0d1c-4ef8-bb6d-6bb9bd380a22"]; m.RoutingKey != "outbox.event.Customer" || m.Headers["key"] != "c-7" {
		t.Errorf("Customer: key %q headers %v", m.RoutingKey, m.Headers)
	}
}

// TestRecipeDebeziumBytea: Debezium's convention with a bytea payload (Avro bytes), a timestamp column and
// the tracing column as OpenTelemetry's Java instrumentation writes it (java.util.Properties.store output).
func TestRecipeDebeziumBytea(t *testing.T) {
	table, ddl, config := recipe(t, "debezium-bytea")
	e := mappedEnv(t, table, ddl)
	c := e.consume(e.queue)
	e.startMapped(table, config)
	avro := []byte{0x00, 0x02, 0x0c, 'o', '-', '1', 0xff}
	trace := "#Mon Mar 03 10:00:00 UTC 2025\ntraceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01\n" +
		"tracestate=rojo\\=00f067aa0ba902b7\n"
	_, err := e.db.Exec(context.Background(), `INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, timestamp, payload, tracingspancontext)
		VALUES ($1, 'Order', 'o-1', 'OrderCreated', '2025-03-04 05:06:07.123', $2, $3)`, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", avro, trace)
	if err != nil {
		t.Fatal(err)
	}
	m := e.deliveriesByID(c, 1)["a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"]
	if m.RoutingKey != "Order.events" || m.ContentType != "application/avro" || !bytes.Equal(m.Body, avro) ||
		m.Timestamp.Unix() != time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC).Unix() || m.Type != "OrderCreated" {
		t.Errorf("key %q content %q body %x ts %v type %q", m.RoutingKey, m.ContentType, m.Body, m.Timestamp, m.Type)
	}
	checkHeaders(t, "bytea", m.Headers, amqp.Table{"key": "o-1", "eventType": "OrderCreated",
		"timestamp_in_ms": time.Date(2025, 3, 4, 5, 6, 7, 123e6, time.UTC).UnixMilli(),
		"traceparent":     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", "tracestate": "rojo=00f067aa0ba902b7"})
}

// TestRecipePoller: a generic poller's table (bigserial id, topic column, bytea payload, published_at that
// the poller updates); events of one topic arrive in commit order.
func TestRecipePoller(t *testing.T) {
	table, ddl, config := recipe(t, "poller")
	e := mappedEnv(t, table, ddl)
	c := e.consume(e.queue)
	e.startMapped(table, config)
	for i := 0; i < 20; i++ {
		topic := []string{"billing.invoice.created", "shipping.parcel.sent"}[i%2]
		e.exec(`INSERT INTO outbox_messages (topic, payload) VALUES ($1, $2)`, topic, []byte{byte(i), 0xfe})
	}
	e.exec(`UPDATE outbox_messages SET published_at = now()`) // the poller marking its rows: never published
	got := e.deliveriesByID(c, 20)
	m := got["1"]
	if m.RoutingKey != "billing.invoice.created" || m.ContentType != "application/octet-stream" || !bytes.Equal(m.Body, []byte{0, 0xfe}) ||
		m.Headers["id"] != int64(1) || m.Timestamp.IsZero() {
		t.Errorf("row 1: key %q content %q body %x headers %v", m.RoutingKey, m.ContentType, m.Body, m.Headers)
	}
	if _, ok := m.Headers["key"]; ok {
		t.Errorf("a key header without a key column: %v", m.Headers)
	}
	time.Sleep(500 * time.Millisecond) // an update published by mistake would arrive right behind
	last := map[string]int64{}
	deliveries := c.snapshot()
	if len(deliveries) != 20 {
		t.Errorf("%d deliveries, want the 20 inserts only", len(deliveries))
	}
	for _, d := range deliveries {
		id := d.msg.Headers["id"].(int64)
		if id <= last[d.msg.RoutingKey] {
			t.Errorf("topic %s: id %d after %d", d.msg.RoutingKey, id, last[d.msg.RoutingKey])
		}
		last[d.msg.RoutingKey] = id
	}
}
