package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

// TestStatusAndResetOfAShard: with two shards, one streaming and one stopped with events waiting in its
// slot, `status --shard 1/2` (and `--shard 1`) shows that shard's slot, stored position, lag and waiting
// events, as text and as JSON; `status` without --shard lists both shards; a shard that does not exist is
// refused naming those that do; `reset --shard 1/2` counts the waiting events with the shard's publication
// and refuses, and once they are published resets that shard only.
func TestStatusAndResetOfAShard(t *testing.T) {
	e := newStreamEnv(t)
	if e.pgVersion() < 150000 {
		out, code := e.cli("status", "--slot", e.slot, "--shard", "0")
		if code != 2 || !strings.Contains(out, "has no shards in this database") {
			t.Errorf("status --shard 0 without shards (PostgreSQL 14) exited %d:\n%s", code, out)
		}
		return
	}
	e.migrateShards(2)
	c := e.consume(e.queue)
	rs := e.startShards(2)
	w := newWriter(t, e.pgURL, 20)
	w.write(40, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	rs[1].signal(syscall.SIGTERM)
	if code := rs[1].wait(30 * time.Second); code != 0 {
		t.Fatalf("shard 1's router exited %d after SIGTERM", code)
	}
	w.write(60, 5, 0)
	settled(c) // shard 0 publishes its share; shard 1's waits in its slot
	delivered := map[string]bool{}
	for _, d := range c.snapshot() {
		delivered[d.id] = true
	}
	n := 0
	for _, r := range w.rows {
		if !delivered[r.id] {
			n++
		}
	}
	waiting := fmt.Sprint(n)
	if waiting == "0" {
		t.Fatal("no event of shard 1 was written while its router was stopped")
	}
	slot1 := migrations.ShardSlot(e.slot, 1, 2)
	pub1 := migrations.ShardPublication("cdc_router_outbox", 1, 2)

	for _, value := range []string{"1/2", "1"} {
		text, code := e.cli("status", "--slot", e.slot, "--shard", value)
		for _, want := range []string{"slot:             " + slot1 + "\n", "shard:            1/2 (publication " + pub1 + ")",
			"not caught up: " + waiting + " unpublished events", "stored position:  "} {
			if code != 0 || !strings.Contains(text, want) {
				t.Errorf("status --shard %s (exit %d) has no %q:\n%s", value, code, want, text)
			}
		}
	}
	out, code := e.cli("status", "--slot", e.slot, "--shard", "1/2", "--json")
	var one map[string]any
	if err := json.Unmarshal([]byte(out), &one); code != 0 || err != nil {
		t.Fatalf("status --shard 1/2 --json: exit %d, %v\n%s", code, err, out)
	}
	if one["slot"] != slot1 || one["shard"] != "1/2" || one["publication"] != pub1 || fmt.Sprint(one["pending_events"]) != waiting ||
		one["active"] != false || one["stored_position"] == nil {
		t.Errorf("status --shard 1/2 --json: slot %v, shard %v, publication %v, pending_events %v, active %v, stored_position %v; "+
			"want %s, 1/2, %s, %s, false, an object", one["slot"], one["shard"], one["publication"], one["pending_events"],
			one["active"], one["stored_position"], slot1, pub1, waiting)
	}
	if _, ok := one["lag_bytes"].(float64); !ok {
		t.Errorf("status --shard 1/2 --json: lag_bytes %#v, want a number", one["lag_bytes"])
	}

	text, code := e.cli("status", "--slot", e.slot)
	for _, want := range []string{"shards:           2 (shards 0/2, 1/2)", "shard 0/2:        slot " + migrations.ShardSlot(e.slot, 0, 2) + " streaming",
		"shard 1/2:        slot " + slot1 + " not streaming, lag ", ", " + waiting + " events waiting, stored position "} {
		if code != 0 || !strings.Contains(text, want) {
			t.Errorf("status without --shard (exit %d) has no %q:\n%s", code, want, text)
		}
	}
	out, _ = e.cli("status", "--slot", e.slot, "--json")
	var all map[string]any
	if err := json.Unmarshal([]byte(out), &all); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	shards, _ := all["shards"].([]any)
	if len(shards) != 2 {
		t.Fatalf("status --json: shards %#v, want two", all["shards"])
	}
	s0, s1 := shards[0].(map[string]any), shards[1].(map[string]any)
	if s0["shard"] != "0/2" || s0["active"] != true || s1["shard"] != "1/2" || s1["slot"] != slot1 ||
		fmt.Sprint(s1["pending_events"]) != waiting || s1["stored_lsn"] == nil || all["shard"] != nil {
		t.Errorf("status --json shards: %v, %v (shard %v)", s0, s1, all["shard"])
	}
	ops, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "reference.md"))
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	collectKeys(all, "", &keys)
	collectKeys(one, "", &keys)
	for _, k := range keys {
		if !strings.Contains(string(ops), "`"+k+"`") {
			t.Errorf("status --json key %s is not documented in docs/reference.md", k)
		}
	}

	for _, bad := range []struct{ value, want string }{
		{"2/2", "numbered from 0 to 1"},
		{"2", "numbered from 0 to 1"},
		{"1/4", "neither publication cdc_router_outbox_shard_1_of_4 nor slot " + migrations.ShardSlot(e.slot, 1, 4) + " exists; this database has shards 0/2, 1/2"},
	} {
		for _, cmd := range []string{"status", "reset"} {
			out, code := e.cli(cmd, "--slot", e.slot, "--shard", bad.value)
			if code != 2 || !strings.Contains(out, bad.want) {
				t.Errorf("%s --shard %s exited %d, want 2 with %q:\n%s", cmd, bad.value, code, bad.want, out)
			}
		}
	}

	out, code = e.cli("reset", "--slot", e.slot, "--shard", "1/2")
	if code == 0 || !strings.Contains(out, "still holds "+waiting+" unpublished events") || !strings.Contains(out, "read with publication "+pub1) {
		t.Errorf("reset --shard 1/2 with %s events waiting exited %d:\n%s", waiting, code, out)
	}
	r1 := e.start("", "--shard", "1/2")
	r1.waitLog("msg=streaming ", 30*time.Second)
	c.waitFor(t, w.rows, 30*time.Second)
	r1.signal(syscall.SIGTERM)
	if code := r1.wait(30 * time.Second); code != 0 {
		t.Fatalf("shard 1's router exited %d after SIGTERM", code)
	}
	out, code = e.cli("reset", "--slot", e.slot, "--shard", "1")
	if code != 0 || !strings.Contains(out, "reset: slot "+slot1+" dropped") {
		t.Fatalf("reset --shard 1 of a drained shard exited %d:\n%s", code, out)
	}
	if n := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1`, slot1); n != "0" {
		t.Errorf("shard 1's slot survived its reset")
	}
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.positions WHERE slot = $1`, slot1); n != "0" {
		t.Errorf("shard 1's stored position survived its reset")
	}
	if e.scalar(`SELECT active::text FROM pg_replication_slots WHERE slot_name = $1`, migrations.ShardSlot(e.slot, 0, 2)) != "true" {
		t.Errorf("shard 0's slot is no longer streamed after shard 1's reset")
	}
	checkOrder(t, c.snapshot())
}
