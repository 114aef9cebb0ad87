package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// mappedType is the aggregate type (route.by.field) of every row of the mapped table: its events are
// aggregates of their own ("mapped/w<writer>-<n>"), so that the order per aggregate is the mapped table's
// own (docs/migrating-from-polling.md: per key, or per routing value without a key).
const mappedType = "mapped"

// createMappedTable creates gen.MappedTable in Debezium's shape with a sequence as its primary key (the
// snapshot of a mapped table pages by its key: a sequence is insert order, a uuid would not be) and the
// event id a uuid column of its own, and adds it to the publication.
func (w *world) createMappedTable(ctx context.Context, conn *pgx.Conn) error {
	for _, q := range []string{
		`CREATE TABLE ` + gen.MappedTable + ` (seq bigserial PRIMARY KEY, id uuid NOT NULL UNIQUE,
			aggregatetype varchar(255), aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL,
			version bigint NOT NULL, payload jsonb)`,
		`ALTER PUBLICATION cdc_router_outbox ADD TABLE ` + gen.MappedTable,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("mapped table: %w", err)
		}
	}
	return nil
}

// mappedTypeOf is the aggregatetype column of the mapped row r: mappedType, or with
// gen.Setup.InternalExchange the whole name of the exchange its topic names (the per-topic one, or
// gen.InternalExchange for a gen.OpInternal row).
func (w *world) mappedTypeOf(r check.Row) string {
	switch {
	case r.Op == gen.OpInternal:
		return gen.InternalExchange
	case w.plan.Setup.InternalExchange:
		return w.topicExchange()
	}
	return mappedType
}

// topicExchange is the exchange the mapped table's topic names with gen.Setup.ExchangeByTopic.
func (w *world) topicExchange() string { return w.exchange + "." + mappedType }

// writeMappingConfig writes the --config file of the mapped table: Debezium's defaults (id, payload,
// route.by.field=aggregatetype, type) with the aggregate's columns placed as the native shape's headers, so
// that the consumer reads both shapes alike; no event key when keyless; the topic's exchange when by topic.
func (w *world) writeMappingConfig() error {
	s := w.plan.Setup
	lines := []string{"table=" + gen.MappedTable,
		"table.fields.additional.placement=aggregatetype:header:aggregate_type,aggregateid:header:aggregate_id,version:header:aggregate_version"}
	if s.Keyless {
		lines = append(lines, "table.field.event.key=")
	}
	if s.ExchangeByTopic {
		source := "key"
		if s.Keyless {
			source = "topic"
		}
		replacement := w.exchange + ".${routedByValue}"
		if s.InternalExchange {
			replacement = "${routedByValue}" // the rows' aggregate type is the exchange's whole name (mappedTypeOf)
		}
		lines = append(lines, "amqp.topic.target=exchange", "route.topic.replacement="+replacement,
			"amqp.routing.key.source="+source)
	}
	w.mappingConfig = filepath.Join(w.t.TempDir(), "mapped.properties")
	return os.WriteFile(w.mappingConfig, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// declareTopicExchange declares the topic's exchange as its operator would (the router never declares it)
// and binds the consumer's queue to it for every routing key.
func (w *world) declareTopicExchange(ch *amqp.Channel) error {
	if err := ch.ExchangeDeclare(w.topicExchange(), "topic", true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare %s: %w", w.topicExchange(), err)
	}
	return ch.QueueBind(w.queue, "#", w.topicExchange(), false, nil)
}

// mappingFlags are the --config flags of run, backfill and quarantine replay with gen.Setup.Mapped.
func (w *world) mappingFlags() []string {
	if !w.plan.Setup.Mapped {
		return nil
	}
	return []string{"--config", w.mappingConfig}
}

// exchangeFault takes the topic's exchange away for f.Dur (deleted, or the consumer's queue unbound), then
// plays its operator: declares and binds it again, and, once the router had time to finish what it held
// (--refusal-retry), replays the records its absence made (their reasons name the exchange), in bg.
func (w *world) exchangeFault(f gen.Step, bg *sync.WaitGroup) {
	from := time.Now()
	w.exchangeDown.Store(true)
	note := w.brokerDo(func(ch *amqp.Channel) error {
		if f.Kind == gen.FaultExchangeDelete {
			return ch.ExchangeDelete(w.topicExchange(), false, false)
		}
		return ch.QueueUnbind(w.queue, "#", w.topicExchange(), nil)
	})
	time.Sleep(f.Dur)
	if err := w.brokerDo(w.declareTopicExchange); err != "" {
		note += "; restore: " + err
	}
	w.exchangeDown.Store(false)
	w.rec.Event(check.Event{From: from, To: time.Now(), Kind: f.Kind, Note: note})
	bg.Add(1)
	go func() {
		defer bg.Done()
		time.Sleep(4 * time.Second)
		w.rec.Event(w.replayWhere(`reason LIKE '%' || $1 || '%'`, w.topicExchange()))
	}()
}

// brokerDo runs do on a channel of its own on the world's broker (directly, not through the routers'
// proxy) and returns the error as a note ("" when none).
func (w *world) brokerDo(do func(*amqp.Channel) error) string {
	c, err := amqp.Dial(w.amqpURL)
	if err != nil {
		return err.Error()
	}
	defer c.Close()
	ch, err := c.Channel()
	if err == nil {
		err = do(ch)
	}
	if err != nil {
		return err.Error()
	}
	return ""
}
