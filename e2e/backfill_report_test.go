package e2e

import (
	"strings"
	"testing"
)

// TestBackfillReportsPublishedAndQuarantinedApart: a backfill of 4 rows of which one cannot become an event
// (headers that are not a JSON object) says 3 were published and 1 quarantined, not "4 rows published".
func TestBackfillReportsPublishedAndQuarantinedApart(t *testing.T) {
	e := newStreamEnv(t)
	for _, agg := range []string{"1", "2", "3"} {
		e.insertOne("outbox", agg)
	}
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES (gen_random_uuid(), 'order', '4', 1, 'created', '{}', '"not an object"')`)
	out, code := e.cli("backfill", "--where", "true", "--exchange", e.exchange, "--name", "report")
	want := "backfill report done: 4 rows, 3 published to " + e.exchange + " and 1 quarantined"
	if code != 0 || !strings.Contains(out, want) {
		t.Fatalf("backfill: exit %d, want a line %q:\n%s", code, want, out)
	}
	out, code = e.cli("backfill", "--where", "aggregate_id <> '4'", "--exchange", e.exchange, "--name", "clean")
	if want := "backfill clean done: 3 rows published to " + e.exchange; code != 0 || !strings.Contains(out, want) {
		t.Fatalf("backfill without a bad row: exit %d, want a line %q:\n%s", code, want, out)
	}
}
