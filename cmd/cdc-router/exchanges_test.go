package main

import (
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/route"
)

// TestDeclaredLineNamesWhatWasDeclared: migrate's line names the exchange, the alternate exchange and its
// queue as declared (the --exchange and --alternate-exchange overrides, the queue type), or says there is
// no alternate exchange.
func TestDeclaredLineNamesWhatWasDeclared(t *testing.T) {
	for _, tc := range []struct {
		cfg  route.Config
		used bool
		want string
	}{
		{route.Config{}, true, "declared: exchange outbox (topic, alternate exchange outbox.unroutable), exchange outbox.unroutable " +
			"(fanout) and queue outbox.unroutable (classic) bound to it in RabbitMQ; bind your queues to outbox before the first run"},
		{route.Config{Exchange: "orders", AlternateExchange: "orders.lost", UnroutableQueueType: route.QueueTypeQuorum}, true,
			"declared: exchange orders (topic, alternate exchange orders.lost), exchange orders.lost (fanout) and queue " +
				"orders.lost (quorum) bound to it in RabbitMQ; bind your queues to orders before the first run"},
		{route.Config{Exchange: "orders", NoAlternateExchange: true}, true,
			"declared: exchange orders (topic, no alternate exchange) in RabbitMQ; bind your queues to orders before the first run"},
		{route.Config{Exchange: "orders", NoAlternateExchange: true}, false,
			"declared: exchange orders (topic, no alternate exchange) in RabbitMQ; the table's events go to the exchanges their " +
				"topics name, so orders gets only those whose topic names it"},
	} {
		if got := declaredLine(tc.cfg, tc.used); got != tc.want {
			t.Errorf("declaredLine(%+v, %v) =\n%s\nwant\n%s", tc.cfg, tc.used, got, tc.want)
		}
	}
}

// TestStartingLineNamesTheExchangesUsed: run's starting line has exchange=X only when some events go to
// --exchange (a native table, a mapped table routing by routing key, emitted messages), and
// exchange_by_topic naming the tables whose topics name the exchanges.
func TestStartingLineNamesTheExchangesUsed(t *testing.T) {
	byTopic, err := mapping.ParseMapping("amqp.topic.target=exchange\n")
	if err != nil {
		t.Fatal(err)
	}
	byKey, err := mapping.ParseMapping("route.by.field=topic\n")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tables   []string
		mappings map[string]*decode.Mapping
		prefix   string
		want     string
	}{
		{[]string{"public.outbox"}, nil, "", "exchange=x"},
		{[]string{"public.message"}, map[string]*decode.Mapping{"public.message": byTopic}, "", "exchange_by_topic=public.message"},
		{[]string{"public.message"}, map[string]*decode.Mapping{"public.message": byTopic}, "cdc", "exchange=x exchange_by_topic=public.message"},
		{[]string{"public.message", "public.events"}, map[string]*decode.Mapping{"public.message": byTopic, "public.events": byKey}, "",
			"exchange=x exchange_by_topic=public.message"},
		{[]string{"a.m", "b.m"}, map[string]*decode.Mapping{"a.m": byTopic, "b.m": byTopic}, "", "exchange_by_topic=a.m, b.m"},
	} {
		to, topics := destinations(tc.tables, tc.mappings, tc.prefix)
		attrs := startAttrs("x", to, topics)
		var parts []string
		for i := 0; i < len(attrs); i += 2 {
			parts = append(parts, attrs[i].(string)+"="+attrs[i+1].(string))
		}
		if got := strings.Join(parts, " "); got != tc.want {
			t.Errorf("tables %v, prefix %q: %s, want %s", tc.tables, tc.prefix, got, tc.want)
		}
	}
}
