package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// stopRouter stops r with SIGTERM and waits for it.
func stopRouter(t testing.TB, r *router) {
	t.Helper()
	r.signal(syscall.SIGTERM)
	if code := r.wait(30 * time.Second); code != 0 {
		t.Fatalf("router exit %d after SIGTERM", code)
	}
}

func (e *env) slotExists(slot string) bool {
	e.t.Helper()
	return e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE slot_name = $1`, slot) == "1"
}

// TestResetFromAnotherDatabaseRefusesAndLeavesTheSlot: a slot of the same name in another database is not
// this database's: reset refuses it naming the --pg-url of its database, and changes nothing; status shows
// it as foreign. Reset in the slot's own database removes exactly that slot's state.
func TestResetFromAnotherDatabaseRefusesAndLeavesTheSlot(t *testing.T) {
	owner := newStreamEnv(t)
	stopRouter(t, owner.startStreaming())
	other := newEnv(t)
	dbName := owner.slot // newEnv names the slot after its database

	out, code := other.cli("status", "--slot", owner.slot)
	if code != 0 || !strings.Contains(out, "not in this database") || !strings.Contains(out, "belongs to database "+dbName) ||
		strings.Contains(out, "confirmed flush") {
		t.Errorf("status from another database: exit %d\n%s", code, out)
	}
	out, code = other.cli("reset", "--slot", owner.slot)
	if code != 1 || !strings.Contains(out, "belongs to database "+dbName) || !strings.Contains(out, "--pg-url postgres://") ||
		!strings.Contains(out, "/"+dbName) || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("reset from another database: exit %d, want 1 naming the slot's database\n%s", code, out)
	}
	if !owner.slotExists(owner.slot) {
		t.Fatal("reset from another database dropped the slot")
	}
	if n := owner.scalar(`SELECT count(*)::text FROM cdc_router.positions WHERE slot = $1`, owner.slot); n != "1" {
		t.Fatalf("the owner's stored position is gone (%s rows)", n)
	}

	// Another slot's state in the owner's database, and a backfill: reset leaves them.
	owner.exec(`INSERT INTO cdc_router.positions (slot, system_id, timeline, lsn) VALUES ('neighbour', '1', 1, '0/1')`)
	owner.exec(`INSERT INTO cdc_router.snapshots (name, kind, read_lsn, state) VALUES
		('initial:neighbour', 'initial', '0/1', 'done'), ('backfill:kept', 'backfill', '0/1', 'done')`)
	out, code = owner.cli("reset", "--slot", owner.slot)
	if code != 0 {
		t.Fatalf("reset in the slot's own database: exit %d\n%s", code, out)
	}
	if owner.slotExists(owner.slot) {
		t.Error("reset left the slot")
	}
	got := owner.scalar(`SELECT string_agg(x, ',' ORDER BY x) FROM (SELECT 'position:' || slot AS x FROM cdc_router.positions
		UNION ALL SELECT 'job:' || name FROM cdc_router.snapshots) s`)
	if got != "job:backfill:kept,job:initial:neighbour,position:neighbour" {
		t.Errorf("after reset the router tables hold %q, want only the neighbour's state and the backfill", got)
	}
}

// TestResetRefusesWhileARouterCopiesTheInitialSnapshot: reset takes the router's lock of the slot, so it
// refuses while the router copies the initial snapshot (the slot is not active then), and the router
// finishes its snapshot and streams.
func TestResetRefusesWhileARouterCopiesTheInitialSnapshot(t *testing.T) {
	e := newStreamEnv(t)
	w := newWriter(t, e.pgURL, 100)
	w.prefill(60_000, "")
	r := e.start("")
	deadline := time.Now().Add(60 * time.Second)
	for e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots`) == "0" {
		if time.Now().After(deadline) {
			t.Fatalf("the snapshot made no progress:\n%s", tail(r.Output(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	out, code := e.cli("reset", "--slot", e.slot)
	state := e.scalar(`SELECT state || ' ' || rows_done || '/' || rows_total FROM cdc_router.snapshots`)
	t.Logf("reset during the snapshot (%s): exit %d: %s", state, code, strings.TrimSpace(out))
	if code != 1 || !strings.Contains(out, "a router of slot "+e.slot+" is running") {
		t.Fatalf("reset during the initial snapshot: exit %d, want 1\n%s", code, out)
	}
	if !strings.HasPrefix(state, "running") {
		t.Logf("note: the snapshot had finished when reset was refused (%s)", state)
	}
	if !e.slotExists(e.slot) {
		t.Fatal("reset dropped the slot under the snapshot")
	}
	r.waitLog("msg=streaming ", 120*time.Second)
	if strings.Contains(r.Output(), "level=ERROR") {
		t.Errorf("the router logged an error:\n%s", tail(r.Output(), 20))
	}
	stopRouter(t, r)
	if out, code := e.cli("reset", "--slot", e.slot); code != 0 {
		t.Fatalf("reset after the router stopped: exit %d\n%s", code, out)
	}
}

// TestFailedBackfillIsRecordedAndCanBeRerunAndRemoved: a backfill with a bad predicate is recorded as
// failed with its error (status shows failed, never running); a new predicate under the same name works;
// jobs list shows the jobs; jobs remove forgets finished and failed ones, refuses one a process runs and
// the initial snapshot, and removes an interrupted one.
func TestFailedBackfillIsRecordedAndCanBeRerunAndRemoved(t *testing.T) {
	e := newStreamEnv(t)
	e.startStreaming()
	w := newWriter(t, e.pgURL, 3)
	w.write(9, 3, 0)
	out, code := e.cli("backfill", "--where", "nonexistent_col = 1", "--exchange", e.exchange, "--name", "fix")
	if code != 1 || !strings.Contains(out, "nonexistent_col") {
		t.Fatalf("backfill with a bad predicate: exit %d\n%s", code, out)
	}
	if got := e.scalar(`SELECT state || ': ' || error FROM cdc_router.snapshots WHERE name = 'backfill:fix'`); !strings.HasPrefix(got, "failed: ") ||
		!strings.Contains(got, "nonexistent_col") {
		t.Fatalf("the failed backfill is recorded as %q, want failed with its error", got)
	}
	status, _ := e.cli("status", "--slot", e.slot)
	if !strings.Contains(status, "backfill:fix failed") || strings.Contains(status, "backfill:fix running") {
		t.Errorf("status after the failure:\n%s", status)
	}
	if out, code := e.cli("backfill", "--where", "nonexistent_col = 1", "--exchange", e.exchange, "--name", "fix", "--restart"); code != 1 {
		t.Errorf("--restart with the same bad predicate: exit %d\n%s", code, out)
	}
	out, code = e.cli("backfill", "--where", "true", "--exchange", e.exchange, "--name", "fix")
	if code != 0 || !strings.Contains(out, "backfill fix done: 9 rows") {
		t.Fatalf("backfill with a corrected predicate after the failure: exit %d\n%s", code, out)
	}
	if _, code := e.cli("backfill", "--where", "no_such = 2", "--exchange", e.exchange, "--name", "broken"); code != 1 {
		t.Fatal("second bad backfill succeeded")
	}

	// A job a process runs: the test's session holds its lock, as a running backfill does.
	e.exec(`INSERT INTO cdc_router.snapshots (name, kind, read_lsn, state) VALUES ('backfill:live', 'backfill', '0/1', 'running')`)
	e.exec(`SELECT pg_advisory_lock(hashtextextended('cdc_router:backfill:live', 0))`)
	list, code := e.cli("jobs", "list")
	t.Logf("jobs list:\n%s", list)
	for _, want := range []string{"initial:" + e.slot, "backfill:fix", "backfill:broken", "backfill:live"} {
		if !strings.Contains(list, want) {
			t.Errorf("jobs list (exit %d) lacks %s", code, want)
		}
	}
	if !strings.Contains(list, "failed") || !strings.Contains(list, "no_such") {
		t.Errorf("jobs list does not show the failure and its error")
	}
	out, code = e.cli("jobs", "remove", "live")
	if code != 1 || !strings.Contains(out, "running in another process") {
		t.Errorf("removing a running job: exit %d\n%s", code, out)
	}
	out, code = e.cli("jobs", "remove", "initial:"+e.slot)
	if code != 1 || !strings.Contains(out, "cdc-router reset --slot "+e.slot) {
		t.Errorf("removing the initial snapshot: exit %d\n%s", code, out)
	}
	e.exec(`SELECT pg_advisory_unlock(hashtextextended('cdc_router:backfill:live', 0))`)
	status, _ = e.cli("status", "--slot", e.slot)
	if !strings.Contains(status, "backfill:live interrupted") {
		t.Errorf("status shows the unheld running job as:\n%s", status)
	}
	out, code = e.cli("jobs", "remove", "fix", "backfill:broken", "live")
	if code != 0 {
		t.Fatalf("jobs remove: exit %d\n%s", code, out)
	}
	if n := e.scalar(`SELECT string_agg(name, ',') FROM cdc_router.snapshots`); n != "initial:"+e.slot {
		t.Errorf("after jobs remove the jobs are %q", n)
	}
	if _, code := e.cli("jobs", "remove", "fix"); code != 1 {
		t.Errorf("removing a job that does not exist succeeded")
	}
}

// quarantineRow inserts an outbox row with the given payload and headers (SQL expressions) and returns its id.
func (e *env) quarantineRow(aggID, payload, headers string) string {
	e.t.Helper()
	id := uuid()
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES ($1, 'order', $2, 1, 'created', `+payload+`, `+headers+`)`, id, aggID)
	return id
}

func (e *env) recordID(eventID string) string {
	e.t.Helper()
	return e.scalar(`SELECT id::text FROM cdc_router.quarantine WHERE event_id = $1`, eventID)
}

// TestQuarantineCommands: list, show, replay from the outbox row, replay from the stored values of a
// row that is gone, refused replays (stored values that still fail, a value cut to 64 KiB, a handled
// record), discard, purge, and the counts in status. A replayed event arrives on a bound queue with
// x-replayed: true.
func TestQuarantineCommands(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming("--max-payload-bytes", "100")
	big := `jsonb_build_object('s', repeat('x', 200))`
	inOutbox := e.quarantineRow("in-outbox", big, `'{"trace": "t1"}'`)
	gone := e.quarantineRow("gone", big, `'{}'`)
	stillBad := e.quarantineRow("still-bad", `'{}'`, `'{"CC": "x"}'`)
	cut := e.quarantineRow("cut", `jsonb_build_object('s', repeat('y', 70000))`, `'{}'`)
	discard := e.quarantineRow("discard", big, `'{}'`)
	e.waitQuarantined(5, 30*time.Second)
	stopRouter(t, r)
	e.exec(`DELETE FROM outbox WHERE id IN ($1, $2, $3)`, gone, stillBad, cut)

	list, code := e.cli("quarantine", "list", "--limit", "3")
	if code != 0 || strings.Count(list, "\n") != 4 || !strings.Contains(list, discard) || strings.Contains(list, inOutbox) {
		t.Errorf("quarantine list --limit 3 (newest first): exit %d\n%s", code, list)
	}
	show, code := e.cli("quarantine", "show", e.recordID(cut))
	if code != 0 || !strings.Contains(show, `"truncated": true`) || !strings.Contains(show, "event id:       "+cut) ||
		!strings.Contains(show, "over the 100-byte limit") {
		t.Errorf("quarantine show: exit %d\n%s", code, show)
	}

	replay := func(ids ...string) (string, int) {
		return e.cli(append([]string{"quarantine", "replay", "--exchange", e.exchange}, ids...)...)
	}
	out, code := replay(e.recordID(inOutbox), e.recordID(gone))
	if code != 0 || !strings.Contains(out, "replayed from the outbox table") || !strings.Contains(out, "replayed from the stored values") {
		t.Fatalf("replay: exit %d\n%s", code, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		replayed := map[string]bool{}
		for _, d := range c.snapshot() {
			if d.msg.Headers["x-replayed"] == true {
				replayed[d.id] = true
				if d.id == inOutbox && d.msg.Headers["trace"] != "t1" {
					t.Errorf("the replayed event lost its own headers: %v", d.msg.Headers)
				}
			}
		}
		if replayed[inOutbox] && replayed[gone] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replayed events with x-replayed: true that arrived: %v", replayed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := e.scalar(`SELECT string_agg(handled_how, ',') FROM cdc_router.quarantine WHERE event_id IN ($1, $2)
		AND handled_at IS NOT NULL`, inOutbox, gone); got != "replayed,replayed" {
		t.Errorf("handled after replay: %q", got)
	}
	for _, refused := range []struct{ id, want string }{
		{stillBad, "stored values still cannot become an event"},
		{cut, "stored value of payload is not the whole value"},
		{inOutbox, "pass --force"},
	} {
		out, code := replay(e.recordID(refused.id))
		if code != 1 || !strings.Contains(out, refused.want) {
			t.Errorf("replay of %s: exit %d, want 1 with %q\n%s", refused.id, code, refused.want, out)
		}
	}
	if got := e.scalar(`SELECT count(handled_at)::text FROM cdc_router.quarantine WHERE event_id IN ($1, $2)`, stillBad, cut); got != "0" {
		t.Errorf("a refused replay marked %s records handled", got)
	}

	out, code = e.cli("quarantine", "discard", e.recordID(discard))
	if code != 0 || !strings.Contains(out, "discarded") {
		t.Errorf("discard: exit %d\n%s", code, out)
	}
	if got := e.scalar(`SELECT handled_how FROM cdc_router.quarantine WHERE event_id = $1`, discard); got != "discarded" {
		t.Errorf("discarded record: handled_how %q", got)
	}
	status, _ := e.cli("status", "--slot", e.slot)
	if !strings.Contains(status, "quarantined rows: 5 (3 handled, 2 not handled)") {
		t.Errorf("status:\n%s", status)
	}
	list, _ = e.cli("quarantine", "list", "--open")
	if strings.Count(list, "\n") != 3 || !strings.Contains(list, stillBad) || !strings.Contains(list, cut) {
		t.Errorf("quarantine list --open:\n%s", list)
	}
	out, code = e.cli("quarantine", "purge", "--handled-before", "0s")
	if code != 0 || !strings.Contains(out, "purged 3 records") {
		t.Errorf("purge: exit %d\n%s", code, out)
	}
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.quarantine`); n != "2" {
		t.Errorf("after purge %s records are left, want the 2 not handled", n)
	}
}

// TestResetRefusesToDropUnpublishedEvents: with the router (run with --message-prefix) stopped, one event
// committed to a mapped table whose producer deletes the row in the same transaction (Quarkus' default), and
// one logical decoding message with the router's prefix (and one with another prefix, not an event): the
// slot is the only copy of both. reset used to drop it saying only that it did; now it refuses, naming the
// two events ("at least" when the peek is bounded below them), and changes nothing, told only the slot (it
// reads the prefix and the publication from the router's record); a prefix or publication that contradicts
// the record is refused naming both; without a record it refuses too when it cannot count (a --publication
// that does not exist); reset --force drops them and says so; a slot with nothing unpublished resets
// without --force.
func TestResetRefusesToDropUnpublishedEvents(t *testing.T) {
	e := newStreamEnv(t)
	e.exec(debeziumTable)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE dbz_outbox`)
	if out, code := e.cli("migrate", "--emit-function"); code != 0 {
		t.Fatalf("migrate --emit-function: exit %d\n%s", code, out)
	}
	config := writeConfig(t, "table=public.dbz_outbox\n")
	flags := []string{"--table", "public.outbox", "--table", "public.dbz_outbox", "--config", config, "--snapshot", "never",
		"--message-prefix", "cdc-router.outbox"}
	stopRouter(t, e.startStreaming(flags...))
	e.exec(`BEGIN;
		INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload) VALUES (gen_random_uuid(), 'customer', 'c-1', 'Created', '{}');
		DELETE FROM dbz_outbox;
		SELECT pg_logical_emit_message(true, 'cdc-router.outbox', '{}');
		SELECT pg_logical_emit_message(true, 'someone.else', '{}');
		COMMIT`)
	out, code := e.cli("reset", "--slot", e.slot)
	if code != 1 || !strings.Contains(out, "still holds 2 unpublished events (1 inserts into the publication's tables, "+
		"1 logical decoding messages)") || !strings.Contains(out, "--force") || !strings.Contains(out, "nothing was changed") {
		t.Fatalf("reset of a slot holding unpublished events: exit %d, want 1 naming 2 events and --force\n%s", code, out)
	}
	t.Logf("refused: %s", strings.TrimSpace(out))
	if !e.slotExists(e.slot) {
		t.Fatal("the refused reset dropped the slot")
	}
	out, code = e.cli("reset", "--slot", e.slot, "--peek-limit", "3")
	if code != 1 || !strings.Contains(out, "still holds at least 2 unpublished events") {
		t.Fatalf("reset with the peek bounded to 3 rows: exit %d, want 1 naming at least 2 events\n%s", code, out)
	}
	out, code = e.cli("reset", "--slot", e.slot, "--message-prefix", "someone.else")
	if code != 2 || !strings.Contains(out, "--message-prefix someone.else") || !strings.Contains(out, "cdc-router.outbox") {
		t.Fatalf("reset with a prefix its router does not run with: exit %d, want 2 naming both\n%s", code, out)
	}
	out, code = e.cli("reset", "--slot", e.slot, "--publication", "not_the_routers")
	if code != 2 || !strings.Contains(out, "--publication not_the_routers") || !strings.Contains(out, "cdc_router_outbox") {
		t.Fatalf("reset with a publication its router does not read: exit %d, want 2 naming both\n%s", code, out)
	}
	e.exec(`DELETE FROM cdc_router.routers`) // a router of a version before records
	out, code = e.cli("reset", "--slot", e.slot, "--publication", "not_the_routers")
	if code != 1 || !strings.Contains(out, `publication "not_the_routers" does not exist`) || !strings.Contains(out, "give reset the --publication") {
		t.Fatalf("reset with a publication that does not exist: exit %d, want 1 naming --publication\n%s", code, out)
	}
	out, code = e.cli("reset", "--slot", e.slot, "--force", "--message-prefix", "cdc-router.outbox")
	if code != 0 || !strings.Contains(out, "reset --force: dropped 2 unpublished events") || e.slotExists(e.slot) {
		t.Fatalf("reset --force: exit %d, slot left: %v\n%s", code, e.slotExists(e.slot), out)
	}
	stopRouter(t, e.startStreaming(flags...))
	e.exec(`INSERT INTO other (note) VALUES ('not an outbox table')`)
	if out, code := e.cli("reset", "--slot", e.slot); code != 0 || strings.Contains(out, "unpublished") || e.slotExists(e.slot) {
		t.Fatalf("reset of a slot with nothing unpublished: exit %d\n%s", code, out)
	}
}
