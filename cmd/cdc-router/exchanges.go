package main

import (
	"fmt"
	"strings"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/route"
)

// destinations says where run's events go: toExchange when some go to --exchange (a native table, a mapped
// table routing by routing key, or the events emitted with --message-prefix); byTopic names the mapped
// tables whose events go to the exchanges their topics name (amqp.topic.target=exchange).
func destinations(tables []string, mappings map[string]*decode.Mapping, messagePrefix string) (toExchange bool, byTopic []string) {
	toExchange = messagePrefix != ""
	for _, t := range tables {
		m := mappings[decode.QualifiedTable(t)]
		if m != nil && m.TopicTarget == mapping.TargetExchange {
			byTopic = append(byTopic, decode.QualifiedTable(t))
		} else {
			toExchange = true
		}
	}
	return toExchange, byTopic
}

// startAttrs are the attributes of run's "starting" line: the exchange only when events go there, and the
// tables whose events go to the exchanges their topics name.
func startAttrs(exchange string, toExchange bool, byTopic []string) []any {
	var attrs []any
	if toExchange {
		attrs = append(attrs, "exchange", exchange)
	}
	if len(byTopic) > 0 {
		attrs = append(attrs, "exchange_by_topic", strings.Join(byTopic, ", "))
	}
	return attrs
}

// declaredLine is what migrate prints after declaring rcfg's topology: every name as declared. used is
// false when run publishes none of its table's events there (its topics name the exchanges).
func declaredLine(rcfg route.Config, used bool) string {
	exchange, alternate := rcfg.Declared()
	what := fmt.Sprintf("exchange %s (topic, no alternate exchange)", exchange)
	if alternate != "" {
		queueType := rcfg.UnroutableQueueType
		if queueType == "" {
			queueType = route.QueueTypeClassic
		}
		what = fmt.Sprintf("exchange %s (topic, alternate exchange %s), exchange %s (fanout) and queue %s (%s) bound to it",
			exchange, alternate, alternate, alternate, queueType)
	}
	next := fmt.Sprintf("bind your queues to %s before the first run", exchange)
	if !used {
		next = fmt.Sprintf("the table's events go to the exchanges their topics name, so %s gets only those whose topic names it", exchange)
	}
	return fmt.Sprintf("declared: %s in RabbitMQ; %s", what, next)
}

// topicExchangesLine is what migrate prints for a mapping whose topics name the exchanges
// (amqp.topic.target=exchange): run publishes there, and neither migrate nor run declares them.
func topicExchangesLine(table string, m *decode.Mapping) string {
	return fmt.Sprintf("not declared: the exchanges the topics of %s name (amqp.topic.target=exchange: route.by.field=%s, "+
		"route.topic.replacement=%s), to which run publishes its events: declare each, with its bindings, before rows "+
		"routed to it are written", table, m.RouteColumn, m.TopicReplacement)
}
