package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestMigrateAndLogsNameTheExchangesUsed (amqp.topic.target=exchange): `migrate --amqp-url --exchange X
// --config FILE` prints every object it declared under its real name (X, X.unroutable and its queue), says
// that the table's events go elsewhere, and names the exchanges the topics route to, which it does not
// declare; `run` logs no exchange=X on its starting line but the table whose topics name the exchanges, and
// each such exchange once, when its first event finds it.
func TestMigrateAndLogsNameTheExchangesUsed(t *testing.T) {
	e, orders, config := perTopicExchanges(t, "o-1", "o-2")
	out, code := e.cli("migrate", "--table", "public.dbz_outbox", "--publication", "dbz_outbox_pub", "--config", config,
		"--exchange", e.exchange, "--amqp-url", e.amqpURL)
	if code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, out)
	}
	for _, want := range []string{
		fmt.Sprintf("declared: exchange %[1]s (topic, alternate exchange %[1]s.unroutable), exchange %[1]s.unroutable (fanout) and "+
			"queue %[1]s.unroutable (classic) bound to it in RabbitMQ; the table's events go to the exchanges their topics name, "+
			"so %[1]s gets only those whose topic names it\n", e.exchange),
		fmt.Sprintf("not declared: the exchanges the topics of public.dbz_outbox name (amqp.topic.target=exchange: "+
			"route.by.field=aggregatetype, route.topic.replacement=%s.${routedByValue}), to which run publishes its events: "+
			"declare each, with its bindings, before rows routed to it are written\n", e.exchange),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("migrate printed\n%s\nwant the line\n%s", out, want)
		}
	}
	ch := e.channel()
	if _, err := ch.QueueDeclarePassive(e.exchange+".unroutable", true, false, false, false, nil); err != nil {
		t.Fatalf("the queue migrate named: %v", err)
	}

	c := e.consume(e.queue)
	r := e.startMapped("dbz_outbox", config)
	for _, key := range []string{"o-1", "o-2", "o-1"} {
		e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'Order', $2, 'Changed', '{}')`, uuid(), key)
	}
	deadline := time.Now().Add(20 * time.Second)
	for len(c.snapshot()) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(c.snapshot()); n != 3 {
		t.Fatalf("%d messages on the topic's exchange, want 3", n)
	}
	logs := r.Output()
	starting := regexp.MustCompile(`(?m)^.*msg=starting .*$`).FindString(logs)
	if strings.Contains(starting, " exchange=") || !strings.Contains(starting, " exchange_by_topic=public.dbz_outbox ") {
		t.Errorf("starting line %q: want no exchange=, and exchange_by_topic=public.dbz_outbox", starting)
	}
	if !strings.Contains(logs, `msg="no table publishes to --exchange: the events go to the exchanges their topics name`) {
		t.Errorf("no line saying that nothing goes to --exchange:\n%s", tail(logs, 20))
	}
	found := `msg="publishing to an exchange a topic names (amqp.topic.target=exchange): it exists" exchange=` + orders + "\n"
	if n := strings.Count(logs, found); n != 1 {
		t.Errorf("the topic's exchange %s logged %d times, want once:\n%s", orders, n, tail(logs, 20))
	}
}
