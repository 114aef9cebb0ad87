package e2e

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStatusAfterADrainedStopSaysCaughtUp: after a graceful, drained SIGTERM stop, `status` says the slot is
// caught up and what its remaining bytes of lag are (WAL after the last event, not events), and
// `status --json` has pending_events 0 with failover and synced; once an event is written while the router
// is stopped, both say one event waits.
func TestStatusAfterADrainedStopSaysCaughtUp(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	r.signal(syscall.SIGTERM)
	if code := r.wait(40 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d\n%s", code, tail(r.Output(), 20))
	}
	if !strings.Contains(r.Output(), "drained") {
		t.Fatalf("the stop did not drain:\n%s", tail(r.Output(), 20))
	}

	text, code := e.cli("status", "--slot", e.slot)
	if code != 0 || !strings.Contains(text, "caught up: no events wait in the slot") {
		t.Errorf("status after a drained stop (exit %d) does not say the slot is caught up:\n%s", code, text)
	}
	if strings.Contains(text, "not caught up") {
		t.Errorf("status after a drained stop says events wait:\n%s", text)
	}
	got := statusJSON(t, e)
	if got["pending_events"] != float64(0) || got["failover"] != false || got["synced"] != false ||
		got["invalidation_reason"] != nil {
		t.Errorf("status --json after a drained stop: pending_events %#v, failover %#v, synced %#v, invalidation_reason %#v; "+
			"want 0, false, false, null", got["pending_events"], got["failover"], got["synced"], got["invalidation_reason"])
	}

	w.write(1, 1, 0)
	text, _ = e.cli("status", "--slot", e.slot)
	if !strings.Contains(text, "not caught up: 1 unpublished events (1 inserts") {
		t.Errorf("status with one event written after the stop does not say it waits:\n%s", text)
	}
	if got := statusJSON(t, e); got["pending_events"] != float64(1) {
		t.Errorf("status --json pending_events = %#v with one event written after the stop, want 1", got["pending_events"])
	}
}

// statusJSON runs `status --json` for the env's slot and decodes it.
func statusJSON(t *testing.T, e *env) map[string]any {
	t.Helper()
	out, code := e.cli("status", "--json", "--slot", e.slot)
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s", code, out)
	}
	var got map[string]any
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("status --json is not one JSON object: %v\n%s", err, out)
	}
	return got
}
