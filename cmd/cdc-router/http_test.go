package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/route"
)

func TestSlotProblem(t *testing.T) {
	checked := time.Now()
	for _, tc := range []struct {
		name    string
		h       pgserver.SlotHealth
		minSafe int64
		want    string
	}{
		{"never read", pgserver.SlotHealth{}, 0, ""},
		{"no limit", pgserver.SlotHealth{Checked: checked, WALStatus: "reserved", MaxKeepBytes: -1}, 0, ""},
		{"plenty left, default threshold", pgserver.SlotHealth{Checked: checked, WALStatus: "reserved",
			SafeWALBytes: 900 << 20, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, 0, ""},
		{"under a tenth of the limit", pgserver.SlotHealth{Checked: checked, WALStatus: "extended",
			SafeWALBytes: 50 << 20, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, 0, "50.0 MiB from invalidation"},
		{"under the flag", pgserver.SlotHealth{Checked: checked, WALStatus: "reserved",
			SafeWALBytes: 900 << 20, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, 1 << 30, "below --min-safe-wal-bytes 1.0 GiB"},
		{"check off", pgserver.SlotHealth{Checked: checked, WALStatus: "unreserved",
			SafeWALBytes: -5, SafeWALKnown: true, MaxKeepBytes: 1 << 30}, -1, ""},
		{"lost", pgserver.SlotHealth{Checked: checked, WALStatus: "lost"}, -1, "invalidated (wal_status lost)"},
	} {
		got := slotProblem(tc.h, tc.minSafe)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestReadyzWhileTheBrokerBlocks: a streaming router is ready, and unready (503, naming the block and the
// fix) while RabbitMQ blocks its connection; ready again once the block ends. The chaos harness found the
// stall (seed 73): a memory alarm longer than the stall bound left /readyz at 200.
func TestReadyzWhileTheBrokerBlocks(t *testing.T) {
	s := &metrics.Stats{}
	s.SetState(metrics.StateStreaming, nil)
	blocked := ""
	h := handler(s, prometheus.NewRegistry(), -1, func() string { return blocked })
	ready := func() (int, string) { return readyz(h) }
	if code, body := ready(); code != 200 {
		t.Fatalf("streaming: /readyz = %d %s, want 200", code, body)
	}
	blocked = "RabbitMQ blocks the router's connection (connection.blocked: low on memory) for 25s: nothing is published until the broker's memory or disk alarm clears"
	if code, body := ready(); code != 503 || !strings.Contains(body, "connection.blocked: low on memory") {
		t.Fatalf("blocked: /readyz = %d %s, want 503 naming the block", code, body)
	}
	blocked = ""
	if code, body := ready(); code != 200 {
		t.Fatalf("unblocked: /readyz = %d %s, want 200", code, body)
	}
}

// readyz asks h for /readyz.
func readyz(h http.Handler) (int, string) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	return rec.Code, rec.Body.String()
}

// TestReadyzWhileRabbitMQConfirmsNothing: a streaming router whose oldest write RabbitMQ has not confirmed
// for route.UnconfirmedBound is unready, naming the broker's likely faults (seed 8100: a node that took
// publishes and confirmed none left /readyz at 200 for 400 s); a slow but steady broker's round trip of a
// second or two is not, and a confirm makes it ready again.
func TestReadyzWhileRabbitMQConfirmsNothing(t *testing.T) {
	s := &metrics.Stats{}
	s.SetState(metrics.StateStreaming, nil)
	var age time.Duration
	h := handler(s, prometheus.NewRegistry(), -1, func() string { return unconfirmed(age) })
	for _, tc := range []struct {
		age  time.Duration
		code int
		want string
	}{
		{0, 200, ""},
		{2 * time.Second, 200, ""}, // a loaded broker's confirm round trip
		{route.UnconfirmedBound - time.Second, 200, ""},
		{12 * time.Second, 503, "RabbitMQ has not confirmed the oldest message the router wrote to it for 12s (a stuck quorum queue, " +
			"a cluster without its majority, or a node that takes publishes and confirms none?)"},
		{0, 200, ""}, // confirmed
	} {
		age = tc.age
		code, body := readyz(h)
		if code != tc.code || !strings.Contains(body, tc.want) || (tc.want == "") != !strings.Contains(body, `"problem"`) {
			t.Errorf("oldest write unconfirmed for %v: /readyz = %d %s, want %d %q", tc.age, code, body, tc.code, tc.want)
		}
	}
	if p := brokerProblem(nil)(); p != "" {
		t.Errorf("without route metrics: %q", p)
	}
}

// TestReadyzShowsAPastErrorAsPast: the error of a restart is last_error while the router restarts; once it
// streams (or copies, or stands by) again it is previous_error, with previous_error_at, and last_error is
// gone, so that a router that recovered minutes ago does not read as failing now.
func TestReadyzShowsAPastErrorAsPast(t *testing.T) {
	s := &metrics.Stats{}
	h := handler(s, prometheus.NewRegistry(), -1, nil)
	body := func() map[string]any {
		t.Helper()
		_, b := readyz(h)
		var m map[string]any
		if err := json.Unmarshal([]byte(b), &m); err != nil {
			t.Fatalf("/readyz body %s: %v", b, err)
		}
		return m
	}
	s.SetState(metrics.StateStreaming, nil)
	if m := body(); m["last_error"] != nil || m["previous_error"] != nil || m["previous_error_at"] != nil {
		t.Errorf("never failed: %v, want no error fields", m)
	}
	before := time.Now().Add(-time.Second)
	s.SetState(metrics.StateRestarting, errors.New("receive: unexpected EOF"))
	if m := body(); m["last_error"] != "receive: unexpected EOF" || m["previous_error"] != nil {
		t.Errorf("restarting: %v, want last_error and no previous_error", m)
	}
	for _, state := range []string{metrics.StateStreaming, metrics.StateSnapshot, metrics.StateStandby} {
		s.SetState(state, nil)
		m := body()
		at, err := time.Parse(time.RFC3339, fmt.Sprint(m["previous_error_at"]))
		if m["last_error"] != nil || m["previous_error"] != "receive: unexpected EOF" || err != nil || at.Before(before) || at.After(time.Now()) {
			t.Errorf("%s again: %v, want previous_error and previous_error_at (RFC 3339, the restart's time), no last_error", state, m)
		}
	}
}
