package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// startFromFile runs `cdc-router run --config-file path` with only the connection URLs in the environment
// (as a deployment keeps its secrets), and waits until it streams.
func (e *env) startFromFile(path string) *router {
	e.t.Helper()
	cmd := exec.Command(binary(e.t, e.tags), "run", "--config-file", path)
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+e.pgURL, "CDC_ROUTER_AMQP_URL="+e.amqpURL)
	r := watchRouter(e.t, cmd)
	r.waitLog("msg=streaming ", 30*time.Second)
	return r
}

// fleetJSON runs `status --json` with no slot and returns its slots by name.
func fleetJSON(t *testing.T, e *env) map[string]map[string]any {
	t.Helper()
	out, code := e.cli("status", "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d\n%s", code, out)
	}
	var f struct {
		Slots []map[string]any `json:"slots"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	slots := map[string]map[string]any{}
	for _, s := range f.Slots {
		slots[s["slot"].(string)] = s
	}
	return slots
}

// TestFourRoutersFromConfigurationFiles runs four routers of different shapes on one database, each from a
// configuration file: a native table, two Debezium-shaped tables with mappings, and a native table with a
// message prefix. `status` with no flags lists all four with what each runs with, running and stopped;
// `reset --slot` of the stopped prefixed router refuses while signed events wait, with no other flag (it
// learns the prefix from the record); a quarantined row of a mapped table is replayed with no flag but its
// ID; a flag that contradicts the record is refused naming both values.
func TestFourRoutersFromConfigurationFiles(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	for _, table := range []string{"dbz_a", "dbz_b"} {
		e.exec(strings.ReplaceAll(strings.Replace(debeziumTable, "aggregatetype varchar(255) NOT NULL", "aggregatetype varchar(255)", 1),
			"dbz_outbox", table))
		if out, code := e.cli("migrate", "--table", "public."+table, "--publication", table+"_pub"); code != 0 {
			t.Fatalf("migrate %s: exit %d: %s", table, code, out)
		}
	}
	if out, code := e.cli("migrate", "--table", "public.emitted", "--publication", "emitted_pub", "--emit-function"); code != 0 {
		t.Fatalf("migrate --emit-function: exit %d: %s", code, out)
	}
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	write("a.properties", "route.topic.replacement=a.${routedByValue}\n")
	write("b.properties", "table=public.dbz_b\nroute.topic.replacement=b.${routedByValue}\n")
	slot := func(name string) string { return e.slot + "_" + name }
	common := "exchange: " + e.exchange + "\nsnapshot: never\nlog-level: debug\n"
	files := map[string]string{
		"native":  write("native.yaml", "# the native outbox\nslot: "+slot("native")+"\n"+common),
		"a":       write("a.yaml", "slot: "+slot("a")+"\ntable: public.dbz_a\npublication: dbz_a_pub\nmapping: a.properties\n"+common),
		"b":       write("b.yaml", "slot: "+slot("b")+"\ntable: [public.dbz_b]\npublication: dbz_b_pub\nmapping: [b.properties]\n"+common),
		"emitted": write("emitted.yaml", "slot: "+slot("emitted")+"\ntable: public.emitted\npublication: emitted_pub\nmessage-prefix: cdc-router.outbox\n"+common),
	}
	if out, code := e.cli("config", "check", files["a"]); code != 0 || !strings.Contains(out, "RabbitMQ: ok") {
		t.Fatalf("config check %s: exit %d\n%s", files["a"], code, out)
	}
	routers := map[string]*router{}
	for name, path := range files {
		routers[name] = e.startFromFile(path)
	}
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', '1', 1, 'native', '{}')`)
	e.exec(`INSERT INTO dbz_a (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'Order', 'o-1', 'A', '{}')`)
	e.exec(`INSERT INTO dbz_b (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'Order', 'o-2', 'B', '{}')`)
	e.exec(`SELECT cdc_router.emit('order', '2', 1, 'emitted', '{}'::jsonb, '{}'::jsonb)`)
	keys := map[string]bool{}
	for _, d := range e.deliveriesByID(c, 4) {
		keys[d.RoutingKey] = true
	}
	if !keys["a.Order"] || !keys["b.Order"] || len(keys) != 4 { // the native and the emitted event: their own
		t.Errorf("routing keys %v: want a.Order, b.Order and the native ones", keys)
	}

	// The native router stops; the others run.
	routers["native"].signal(syscall.SIGTERM)
	if code := routers["native"].wait(40 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	// A record follows its router's state within a second or so (registry.Keep).
	var fleet map[string]map[string]any
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if fleet = fleetJSON(t, e); fleet[slot("a")]["state"] == "streaming" && fleet[slot("b")]["state"] == "streaming" &&
			fleet[slot("emitted")]["state"] == "streaming" {
			break
		}
	}
	for name, want := range map[string]struct{ state, publication, prefix string }{
		"native":  {"stopped", "cdc_router_outbox", ""},
		"a":       {"streaming", "dbz_a_pub", ""},
		"b":       {"streaming", "dbz_b_pub", ""},
		"emitted": {"streaming", "emitted_pub", "cdc-router.outbox"},
	} {
		s := fleet[slot(name)]
		if s == nil {
			t.Errorf("status lists no slot %s: %v", slot(name), fleet)
			continue
		}
		if s["state"] != want.state || s["publication"] != want.publication || s["message_prefix"] != want.prefix {
			t.Errorf("slot %s: state %v publication %v prefix %v; want %+v", slot(name), s["state"], s["publication"],
				s["message_prefix"], want)
		}
	}
	if mapped, _ := fleet[slot("a")]["mapped_tables"].([]any); len(mapped) != 1 || mapped[0] != "public.dbz_a" {
		t.Errorf("slot %s mapped tables %v", slot("a"), fleet[slot("a")]["mapped_tables"])
	}
	text, code := e.cli("status")
	for _, name := range []string{"native", "a", "b", "emitted"} {
		if code != 0 || !strings.Contains(text, slot(name)) {
			t.Errorf("status (exit %d) does not name %s:\n%s", code, slot(name), text)
		}
	}

	// The prefixed router stops; three signed events are committed after it: reset, told nothing but the
	// slot, counts them from the record's prefix and refuses.
	routers["emitted"].signal(syscall.SIGTERM)
	if code := routers["emitted"].wait(40 * time.Second); code != 0 {
		t.Fatalf("SIGTERM: exit %d", code)
	}
	e.exec(`SELECT cdc_router.emit('order', '3', v, 'late', '{}'::jsonb, '{}'::jsonb) FROM generate_series(1, 3) v`)
	if out, code := e.cli("reset", "--slot", slot("emitted")); code == 0 || !strings.Contains(out, "3") ||
		!e.slotExists(slot("emitted")) {
		t.Errorf("reset of the prefixed router's slot with 3 signed events waiting: exit %d, slot kept %v\n%s",
			code, e.slotExists(slot("emitted")), out)
	}
	fleet = fleetJSON(t, e)
	if got := fleet[slot("emitted")]["pending_events"]; got != float64(3) {
		t.Errorf("status lists %v events waiting in the stopped prefixed router's slot, want 3", got)
	}
	if got := fleet[slot("native")]["pending_events"]; got != float64(0) {
		t.Errorf("status lists %v events waiting in the drained native router's slot, want 0", got)
	}
	// A transaction in flight that has emitted: no slot is caught up while it runs.
	tx, err := e.db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), `SELECT cdc_router.emit('order', '4', 1, 'open', '{}'::jsonb, '{}'::jsonb)`); err != nil {
		t.Fatal(err)
	}
	out, code := e.cli("status", "--json")
	var inFlight struct {
		InFlight []map[string]any `json:"transactions_in_flight"`
	}
	if err := json.Unmarshal([]byte(out), &inFlight); code != 0 || err != nil || len(inFlight.InFlight) != 1 {
		t.Errorf("status --json with one transaction in flight: exit %d, %v, %v", code, err, inFlight.InFlight)
	}
	if text, _ := e.cli("status"); !strings.Contains(text, "not caught up: no events wait in the slot yet, but 1 transactions") {
		t.Errorf("status with a transaction in flight says a drained slot is caught up:\n%s", text)
	}
	if err := tx.Rollback(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, code := e.cli("status", "--slot", slot("emitted")); code != 0 || !strings.Contains(out, "not caught up: 3 unpublished events") {
		t.Errorf("status --slot %s: exit %d\n%s", slot("emitted"), code, out)
	}
	if out, code := e.cli("status", "--slot", slot("emitted"), "--message-prefix", "other"); code != 2 ||
		!strings.Contains(out, "--message-prefix other") || !strings.Contains(out, "cdc-router.outbox") {
		t.Errorf("a prefix that contradicts the record: exit %d\n%s", code, out)
	}

	// A row of dbz_a with no routing value is quarantined; fixed, it is replayed by its record's ID alone.
	var id string
	if err := e.db.QueryRow(context.Background(), `INSERT INTO dbz_a (id, aggregatetype, aggregateid, type, payload)
		VALUES (gen_random_uuid(), NULL, 'o-9', 'Fixed', '{}') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	e.waitQuarantined(1, 30*time.Second)
	e.exec(`UPDATE dbz_a SET aggregatetype = 'Order' WHERE id = $1`, id)
	if out, code := e.cli("quarantine", "replay", e.recordID(id)); code != 0 {
		t.Fatalf("quarantine replay of a mapped row with the record alone: exit %d\n%s", code, out)
	}
	got := e.deliveriesByID(c, 5) // the four first, and the replayed row
	if d, ok := got[id]; !ok || d.RoutingKey != "a.Order" || d.Headers["x-replayed"] != true {
		t.Errorf("the replayed row: %v key %q headers %v", ok, d.RoutingKey, d.Headers)
	}
}
