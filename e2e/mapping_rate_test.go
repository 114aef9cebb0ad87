package e2e

import (
	"fmt"
	"testing"
	"time"
)

// TestMappedRateWithoutKey checks that, with no key column, one topic's events arrive in commit order,
// and logs how fast they move (one ordering lane per topic: one event per confirm round trip) against the
// same rows with the id as the key (no order promised across keys). It asserts nothing about time.
func TestMappedRateWithoutKey(t *testing.T) {
	const n = 2000
	for _, key := range []string{"", "id"} {
		t.Run("key="+key, func(t *testing.T) {
			table, ddl, _ := recipe(t, "poller")
			e := mappedEnv(t, table, ddl)
			c := e.consume(e.queue)
			e.startMapped(table, writeConfig(t, fmt.Sprintf("table.field.event.key=%s\nroute.by.field=topic\nroute.topic.replacement=${routedByValue}\n", key)))
			began := time.Now()
			e.exec(`INSERT INTO outbox_messages (topic, payload) SELECT 'one.topic', '\x00' FROM generate_series(1, $1)`, n)
			e.deliveriesByIDWithin(c, n, 120*time.Second)
			if key == "" {
				var last int64
				for _, d := range c.snapshot() {
					if id := d.msg.Headers["id"].(int64); id < last {
						t.Fatalf("id %d delivered after %d", id, last)
					} else {
						last = id
					}
				}
			}
			t.Logf("key=%q: %d events of one topic in %v (%.0f/s)", key, n, time.Since(began).Round(time.Millisecond), n/time.Since(began).Seconds())
		})
	}
}
