package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestMappedQuarantineNamesItsTable: beside a native outbox (the first --table), a mapped table's rows that
// cannot be published are quarantined with the mapped table's name and its own columns: one refused by the
// decoder's check (a routing key over 255 bytes) and one refused by the publisher (a header placement over
// frame_max). `quarantine show` prints them; the rows after them are published.
func TestMappedQuarantineNamesItsTable(t *testing.T) {
	e := newStreamEnv(t)
	e.exec(debeziumTable)
	e.exec(`ALTER TABLE dbz_outbox ADD COLUMN note text`)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE dbz_outbox`)
	c := e.consume(e.queue)
	config := writeConfig(t, "table=public.dbz_outbox\ntable.fields.additional.placement=note:header\n")
	e.startStreaming("--table", "public.outbox", "--table", "public.dbz_outbox", "--config", config, "--snapshot", "never")
	const longKey, bigHeader, after = "a0000000-0000-4000-8000-000000000001", "a0000000-0000-4000-8000-000000000002",
		"a0000000-0000-4000-8000-000000000003"
	ctx := context.Background()
	var native string
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		native = insertVersioned(t, tx, "outbox", "agg-n", 1)
		_, err := tx.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload, note) VALUES
			($1, repeat('k', 250), 'c-1', 'Long', '{}', 'n1'),
			($2, 'customer', 'c-1', 'Big', '{}', repeat('h', 200000)),
			($3, 'customer', 'c-1', 'After', '{}', 'n3')`, longKey, bigHeader, after)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := e.deliveriesByID(c, 2)
	if _, ok := got[after]; !ok {
		t.Errorf("the mapped row after the quarantined ones was not published: %v", got)
	}
	if _, ok := got[native]; !ok {
		t.Errorf("the native row was not published")
	}
	e.waitQuarantined(2, 30*time.Second)
	for _, id := range []string{longKey, bigHeader} {
		var table, reason string
		var columns []string
		if err := e.db.QueryRow(ctx, `SELECT table_name, reason, array(SELECT jsonb_object_keys(row_values) ORDER BY 1)
			FROM cdc_router.quarantine WHERE event_id = $1`, id).Scan(&table, &reason, &columns); err != nil {
			t.Fatal(err)
		}
		want := "aggregateid aggregatetype created_at id note payload tracingspancontext type"
		if strings.Contains(reason, "aggregate_") {
			t.Errorf("record of %s: the reason names the native columns: %s", id, reason)
		}
		if table != "public.dbz_outbox" || strings.Join(columns, " ") != want {
			t.Errorf("record of %s: table %s, columns %v; want public.dbz_outbox and %s (reason %s)", id, table, columns, want, reason)
		}
		show, code := e.cli("quarantine", "show", e.recordID(id))
		if code != 0 || !strings.Contains(show, "public.dbz_outbox") || !strings.Contains(show, `"aggregatetype"`) ||
			strings.Contains(show, "aggregate_type") {
			t.Errorf("quarantine show %s: exit %d\n%.3000s", id, code, show)
		}
	}
	if v := e.scalar(`SELECT row_values->>'aggregatetype' FROM cdc_router.quarantine WHERE event_id = $1`, longKey); v != strings.Repeat("k", 250) {
		t.Errorf("stored aggregatetype %q", v)
	}
}

// TestMappedReplayUsesItsExchangeKeyAndCommitTime: a row of a mapped table with amqp.topic.target=exchange,
// routed to an exchange that does not exist yet, is quarantined by a router started after its commit.
// Once the exchange exists, `quarantine replay` publishes it there with its key, prints that exchange and
// key (it used to print --exchange and the native "<aggregate_type>.<event_type>"), stamps it with the
// transaction's commit time (timestamp_in_ms; it used to be the quarantine time) and marks it with
// x-replayed-from-quarantine, the quarantine time.
func TestMappedReplayUsesItsExchangeKeyAndCommitTime(t *testing.T) {
	e := mappedEnv(t, "dbz_outbox", debeziumTable)
	config := writeConfig(t, fmt.Sprintf("table=public.dbz_outbox\namqp.topic.target=exchange\n"+
		"route.topic.replacement=%s.${routedByValue}\namqp.routing.key.source=key\n", e.exchange))
	stopRouter(t, e.startMapped("dbz_outbox", config))
	const id = "d0000000-0000-4000-8000-000000000001"
	e.exec(`INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'Customer', 'c-1', 'Moved', '{}')`, id)
	r := e.startMapped("dbz_outbox", config)
	e.waitQuarantined(1, 30*time.Second)
	stopRouter(t, r)
	customers := e.exchange + ".Customer"
	ch := e.channel()
	if err := ch.ExchangeDeclare(customers, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ch.ExchangeDelete(customers, false, false) })
	if err := ch.QueueBind(e.queue, "c-1", customers, false, nil); err != nil {
		t.Fatal(err)
	}
	c := e.consume(e.queue)
	out, code := e.cli("quarantine", "replay", "--exchange", e.exchange, "--config", config, e.recordID(id))
	want := fmt.Sprintf("event %s published to %s (routing key c-1)", id, customers)
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("replay: exit %d, want %q\n%s", code, want, out)
	}
	msg := e.deliveriesByID(c, 1)[id]
	ms := func(column string) int64 {
		v, err := strconv.ParseInt(e.scalar(`SELECT (extract(epoch FROM date_trunc('milliseconds', `+column+`)) * 1000)::bigint::text
			FROM cdc_router.quarantine WHERE event_id = $1`, id), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	committed, quarantined := ms("commit_time"), ms("quarantined_at")
	created, _ := strconv.ParseInt(e.scalar(`SELECT (extract(epoch FROM date_trunc('milliseconds', created_at)) * 1000)::bigint::text
		FROM dbz_outbox WHERE id = $1`, id), 10, 64)
	if committed < created || committed > created+5000 || committed == quarantined {
		t.Errorf("stored commit time %d ms, row written at %d ms, quarantined at %d ms: want the commit's", committed, created, quarantined)
	}
	if msg.Exchange != customers || msg.RoutingKey != "c-1" || msg.Headers["timestamp_in_ms"] != committed ||
		msg.Timestamp.Unix() != committed/1000 || msg.Headers["x-replayed-from-quarantine"] != quarantined ||
		msg.Headers["x-replayed"] != true {
		t.Errorf("replayed message via %q key %q, timestamp %v, headers %v; want %s, c-1, timestamp_in_ms %d (the commit), "+
			"x-replayed-from-quarantine %d", msg.Exchange, msg.RoutingKey, msg.Timestamp, msg.Headers, customers, committed, quarantined)
	}
}
