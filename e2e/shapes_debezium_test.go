package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDebeziumVectorBinaryTypeColumn is the Debezium vector whose table has a bytea column named type:
// table.field.event.type is unset (Debezium never reads it), so the table is not refused. The router says
// on a start-up line that the option is unused, publishes without an AMQP type, and the option can also
// be switched off explicitly (table.field.event.type=), which silences the line.
func TestDebeziumVectorBinaryTypeColumn(t *testing.T) {
	e := mappedEnv(t, "bin_outbox", `CREATE TABLE bin_outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
		aggregateid varchar(255) NOT NULL, type bytea NOT NULL, payload bytea)`)
	c := e.consume(e.queue)
	r := e.startMapped("bin_outbox", writeConfig(t, ""))
	const unused = `column type of public.bin_outbox is bytea, not text or varchar, so table.field.event.type (unset, default type) is not used`
	if !strings.Contains(r.Output(), unused) {
		t.Errorf("no start-up line saying the type option is unused:\n%s", tail(r.Output(), 15))
	}
	e.exec(`INSERT INTO bin_outbox VALUES ('a0000000-0000-4000-8000-000000000001', 'Order', 'o-1', '\x0102', '\x00ff')`)
	m := e.deliveriesByID(c, 1)["a0000000-0000-4000-8000-000000000001"]
	if m.Type != "" || string(m.Body) != "\x00\xff" || m.ContentType != "application/octet-stream" || m.RoutingKey != "outbox.event.Order" {
		t.Errorf("type %q body %q content type %q key %q", m.Type, m.Body, m.ContentType, m.RoutingKey)
	}
	r.signal(syscall.SIGTERM)
	r.wait(30 * time.Second)

	r = e.startMapped("bin_outbox", writeConfig(t, "table.field.event.type=\n"))
	e.exec(`INSERT INTO bin_outbox VALUES ('b0000000-0000-4000-8000-000000000002', 'Order', 'o-1', '\x03', '\x01')`)
	if m := e.deliveriesByID(c, 2)["b0000000-0000-4000-8000-000000000002"]; m.Type != "" {
		t.Errorf("type %q with the option switched off", m.Type)
	}
	if strings.Contains(r.Output(), "table.field.event.type (unset") {
		t.Errorf("the unused line with the option switched off:\n%s", tail(r.Output(), 15))
	}

	// Named explicitly, a column of another type is still refused at start-up.
	r.signal(syscall.SIGTERM)
	r.wait(30 * time.Second)
	bad := e.start("", "--table", "public.bin_outbox", "--publication", "bin_outbox_pub", "--snapshot", "never",
		"--config", writeConfig(t, "table.field.event.type=type\n"))
	if code := bad.wait(30 * time.Second); code == 0 || !strings.Contains(bad.Output(), "column type named by table.field.event.type is bytea, want text or varchar") {
		t.Errorf("explicit type option on a bytea column: exit %d:\n%s", code, tail(bad.Output(), 10))
	}
}

// TestDebeziumVectorJavaRegexRefused: route.topic.regex with syntax Java reads otherwise than RE2 (a nested
// class, which RE2 takes as a literal [) is refused before any connection, naming the construct.
func TestDebeziumVectorJavaRegexRefused(t *testing.T) {
	e := newEnv(t)
	out, code := e.cli("run", "--snapshot", "never", "--config", writeConfig(t, "route.topic.regex=(?<routedByValue>[[a-z]+)\n"))
	if code != 2 || !strings.Contains(out, `line 1: route.topic.regex "(?<routedByValue>[[a-z]+)" uses a nested character class [[…]], which Java and Go's RE2 engine read differently`) {
		t.Errorf("nested class: exit %d: %s", code, out)
	}
}
