package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/admin"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestStatusJSON: `status --json` of a streaming router's slot is one JSON object in the documented
// schema (every key is in docs/reference.md), with the facts a script checks; the text form shows the lag
// in human units.
func TestStatusJSON(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming("--http-addr", freeAddr(t), "--lanes", "2", "--window", "8")
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	time.Sleep(1500 * time.Millisecond) // the stored position is written about once a second

	// The router's in-flight limit (2 lanes of 8) is in its record from its first heartbeat as a
	// streaming router (a role change is written at once; the publishing is refreshed every 10 s).
	var out string
	var got map[string]any
	deadline := time.Now().Add(15 * time.Second)
	for {
		var code int
		out, code = e.cli("status", "--json", "--slot", e.slot)
		if code != 0 {
			t.Fatalf("status --json: exit %d\n%s", code, out)
		}
		got = nil
		if err := json.Unmarshal([]byte(out), &got); err != nil {
			t.Fatalf("status --json is not one JSON object: %v\n%s", err, out)
		}
		if got["window_limit"] != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	// inflight_events is what was unconfirmed at the heartbeat, which may have come while the events were
	// written: at most the limit.
	if n, ok := got["inflight_events"].(float64); got["window_limit"] != float64(16) || !ok || n < 0 || n > 16 {
		t.Errorf("window_limit = %#v and inflight_events = %#v, want 16 (--lanes 2 × --window 8) and 0 to 16\n%s",
			got["window_limit"], got["inflight_events"], out)
	}
	for key, want := range map[string]any{"schema_version": float64(admin.StatusSchemaVersion), "slot": e.slot,
		"slot_exists": true, "active": true, "router_running": true, "wal_status": "reserved", "slot_database": nil} {
		if got[key] != want {
			t.Errorf("%s = %#v, want %#v\n%s", key, got[key], want, out)
		}
	}
	for _, key := range []string{"lag_bytes", "lag_seconds", "retained_wal_bytes"} {
		if v, ok := got[key].(float64); !ok || v < 0 {
			t.Errorf("%s = %#v, want a number of at least 0\n%s", key, got[key], out)
		}
	}
	if lsn, _ := got["confirmed_flush_lsn"].(string); !regexp.MustCompile(`^[0-9A-F]+/[0-9A-F]+$`).MatchString(lsn) {
		t.Errorf("confirmed_flush_lsn = %#v, want PostgreSQL's text form\n%s", got["confirmed_flush_lsn"], out)
	}
	stored, _ := got["stored_position"].(map[string]any)
	if stored == nil || stored["lsn"] == nil || stored["system_id"] == nil || stored["updated_at"] == nil {
		t.Errorf("stored_position = %#v\n%s", got["stored_position"], out)
	}
	if q, _ := got["quarantine"].(map[string]any); q == nil || q["total"] != float64(0) || q["unhandled"] != float64(0) {
		t.Errorf("quarantine = %#v\n%s", got["quarantine"], out)
	}
	if jobs, ok := got["jobs"].([]any); !ok {
		t.Errorf("jobs = %#v, want an array", got["jobs"])
	} else if len(jobs) == 1 {
		job := jobs[0].(map[string]any)
		if job["kind"] != "initial" || job["state"] != "done" {
			t.Errorf("jobs[0] = %#v", job)
		}
	}

	ops, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	collectKeys(got, "", &keys)
	for _, k := range keys {
		if !strings.Contains(string(ops), "`"+k+"`") {
			t.Errorf("status --json key %s is not documented in docs/reference.md", k)
		}
	}

	if strings.Contains(r.Output(), "could not read the slot's health") {
		t.Errorf("the slot health read failed without max_slot_wal_keep_size:\n%s", tail(r.Output(), 20))
	}

	text, _ := e.cli("status", "--slot", e.slot)
	if !regexp.MustCompile(`lag:\s+\d+(\.\d)? (B|KiB|MiB), (\d+(ms| s)|[0-9hms.]+) \(\d+ bytes\)`).MatchString(text) {
		t.Errorf("status text has no lag in human units:\n%s", text)
	}
	if !regexp.MustCompile(`publishing:\s+\d+ events unconfirmed, in-flight limit 16 `).MatchString(text) {
		t.Errorf("status text does not show the router's in-flight limit:\n%s", text)
	}
}

// collectKeys lists the keys of a decoded JSON object, nested ones as parent.key (array elements as
// parent[].key).
func collectKeys(v any, prefix string, keys *[]string) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			*keys = append(*keys, prefix+k)
			collectKeys(x, prefix+k+".", keys)
		}
	case []any:
		for _, x := range v {
			collectKeys(x, strings.TrimSuffix(prefix, ".")+"[].", keys)
		}
	}
}
