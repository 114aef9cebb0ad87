package e2e

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestEveryEventArrivesInOrderWithItsProperties streams 10,000 events over 100 aggregates in transactions of
// 1 to 500 rows, interleaved with writes to another table.
func TestEveryEventArrivesInOrderWithItsProperties(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.startStreaming()
	w := newWriter(t, e.pgURL, 100)
	began := time.Now()
	w.write(10_000, 500, 0)
	got := c.waitFor(t, w.rows, 120*time.Second)
	t.Logf("10,000 events delivered %v after the first write (%d deliveries)", time.Since(began).Round(time.Millisecond), len(got))
	if extra := unexpected(got, w.rows); len(extra) > 0 {
		t.Errorf("%d deliveries of events never committed", len(extra))
	}
	if dups, _ := duplicates(got); dups != 0 {
		t.Errorf("%d duplicates without any failure", dups)
	}
	checkOrder(t, got)
	checkMessage(t, got[0])
}

// checkMessage asserts the AMQP properties and headers of one delivery of the writer's rows.
func checkMessage(t testing.TB, d delivery) {
	t.Helper()
	m := d.msg
	if m.RoutingKey != "order.created" || m.Type != "created" || m.ContentType != "application/json" ||
		m.DeliveryMode != 2 || m.MessageId != d.id || m.Timestamp.IsZero() {
		t.Errorf("properties: key %q type %q content %q mode %d id %q ts %v", m.RoutingKey, m.Type, m.ContentType,
			m.DeliveryMode, m.MessageId, m.Timestamp)
	}
	var body map[string]any
	if err := json.Unmarshal(m.Body, &body); err != nil || body["agg"] != d.aggID {
		t.Errorf("body %s: %v", m.Body, err)
	}
	h := m.Headers
	want := map[string]any{"aggregate_type": "order", "aggregate_id": d.aggID, "aggregate_version": d.version,
		"schema_version": int32(1), "traceparent": "00-" + d.aggID, "attempt": int64(1), "ratio": 0.5, "flag": true}
	for k, v := range want {
		if h[k] != v {
			t.Errorf("header %s = %#v (%T), want %#v (%T)", k, h[k], h[k], v, v)
		}
	}
	if nested, _ := h["nested"].(string); strings.ReplaceAll(nested, " ", "") != `{"k":1}` {
		t.Errorf("header nested = %#v, want the object's JSON text", h["nested"])
	}
	if _, ok := h["gone"]; ok {
		t.Errorf("a null header was sent")
	}
	if lsn, ok := h["commit_lsn"].(string); !ok {
		t.Errorf("commit_lsn header missing")
	} else if _, err := cdc.ParseLSN(lsn); err != nil {
		t.Errorf("commit_lsn %q: %v", lsn, err)
	}
}

// TestRollbacksUpdatesAndDeletesPublishNothing: only committed inserts are events.
func TestRollbacksUpdatesAndDeletesPublishNothing(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.startStreaming()
	w := newWriter(t, e.pgURL, 5)
	if err := w.txn(10, false); err != nil { // rolled back
		t.Fatal(err)
	}
	w.write(5, 5, 0)
	e.exec(`UPDATE outbox SET payload = '{"changed": true}'`)
	e.exec(`DELETE FROM outbox`)
	w.write(5, 5, 0) // a marker after the updates and deletes
	got := c.waitFor(t, w.rows, 30*time.Second)
	time.Sleep(time.Second) // anything extra would arrive right behind the marker
	got = c.snapshot()
	if len(got) != 10 {
		t.Fatalf("%d deliveries, want exactly the 10 committed inserts", len(got))
	}
	for _, d := range got {
		if strings.Contains(string(d.msg.Body), "changed") {
			t.Errorf("an update was published: %s", d.msg.Body)
		}
	}
}
