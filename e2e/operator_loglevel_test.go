package e2e

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestQuarantinedEventLogsNoError: an event that ends in quarantine (returned as unroutable by an exchange
// of the operator's, which has no alternate exchange) is routine by design. Its refusals restart the
// stream at WARN, its quarantine is one WARN line naming the event, the metric counts it, and nothing is
// logged at ERROR: an operator alerting on ERROR is not paged for it.
func TestQuarantinedEventLogsNoError(t *testing.T) {
	e, _, config := perTopicExchanges(t, "o-1")
	c := e.consume(e.queue)
	addr := freeAddr(t)
	r := e.startMapped("dbz_outbox", config, "--refusal-retry", "1s", "--http-addr", addr)
	ctx := context.Background()
	const lost = "c0000000-0000-4000-8000-000000000025"
	var want []written
	for i, key := range []string{"o-1", "o-unbound", "o-1"} {
		id := uuid()
		if i == 1 {
			id = lost
		}
		if _, err := e.db.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
			VALUES ($1, 'Order', $2, 'Changed', '{}')`, id, key); err != nil {
			t.Fatal(err)
		}
		if key == "o-1" {
			want = append(want, written{key, id})
		}
	}
	e.waitQuarantined(1, 30*time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		seen := map[string]bool{}
		for _, d := range c.snapshot() {
			seen[d.msg.MessageId] = true
		}
		if seen[want[0].id] && seen[want[1].id] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bound events did not arrive within 30 s:\n%s", tail(r.Output(), 40))
		}
	}
	time.Sleep(500 * time.Millisecond) // the log lines after the quarantine record

	out := r.Output()
	var errors, quarantine, restarts []string
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.Contains(line, "level=ERROR"):
			errors = append(errors, line)
		case strings.Contains(line, "event_id="+lost) && quarantineMsg.MatchString(line):
			quarantine = append(quarantine, line)
		case strings.Contains(line, `msg="stream stopped; restarting`) || strings.Contains(line, `msg="router failed`):
			restarts = append(restarts, line)
		}
	}
	if len(errors) > 0 {
		t.Errorf("a routine quarantine logged %d lines at ERROR:\n%s", len(errors), strings.Join(errors, "\n"))
	}
	if len(quarantine) != 1 || !strings.Contains(quarantine[0], "level=WARN") {
		t.Errorf("the quarantine of event %s logged %d lines, want one at WARN:\n%s", lost, len(quarantine), strings.Join(quarantine, "\n"))
	}
	for _, line := range restarts {
		if !strings.Contains(line, "level=WARN") {
			t.Errorf("a retry of the refused event is not at WARN: %s", line)
		}
	}
	if v := scrapeMetrics(t, addr).value(t, `cdc_router_events_quarantined_total{reason="refused"}`); v != 1 {
		t.Errorf("cdc_router_events_quarantined_total = %v, want 1", v)
	}
	if t.Failed() {
		t.Logf("router log:\n%s", tail(out, 60))
	}
}

// quarantineMsg matches a log line whose message says something was quarantined.
var quarantineMsg = regexp.MustCompile(`msg="[^"]*quarantined`)

// TestRefusalLogsOneError: a refusal needs a human, so besides the exit message it is one ERROR line with
// the reason, which a log-based alert sees (the router exits 1 and does not retry it).
func TestRefusalLogsOneError(t *testing.T) {
	e := newStreamEnv(t)
	r := e.start("", "--publication", "no_such_publication")
	if code := r.wait(30 * time.Second); code != 1 {
		t.Fatalf("run with a missing publication: exit %d, want 1\n%s", code, tail(r.Output(), 20))
	}
	var errors []string
	for _, line := range strings.Split(r.Output(), "\n") {
		if strings.Contains(line, "level=ERROR") {
			errors = append(errors, line)
		}
	}
	if len(errors) != 1 || !strings.Contains(errors[0], "no_such_publication") {
		t.Errorf("a refusal logged %d ERROR lines, want one naming the publication:\n%s\nwhole output:\n%s",
			len(errors), strings.Join(errors, "\n"), tail(r.Output(), 20))
	}
}
