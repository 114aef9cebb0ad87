package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// postgresOf starts a throwaway cluster of one PostgreSQL major version (binaries pinned and cached by
// internal/testenv/fetch-postgres.sh, fetched on first use) for one test, whatever version the suite runs on.
// It fails the test when the binaries cannot be had.
func postgresOf(t testing.TB, major int) *testenv.Postgres {
	t.Helper()
	bin, err := testenv.PostgresBin(major)
	if err != nil {
		t.Fatal(err)
	}
	p, err := testenv.StartPostgresIn(bin)
	if err != nil {
		t.Fatalf("start PostgreSQL %d: %v", major, err)
	}
	t.Cleanup(p.Close)
	return p
}

// TestIdleSlotInvalidatedOnPostgres18IsRefused: PostgreSQL 18 invalidates, at a checkpoint, a slot that
// stayed inactive longer than idle_replication_slot_timeout; a router stopped that long must refuse with the
// slot-lost refusal, name the setting, and the reset it names must work.
func TestIdleSlotInvalidatedOnPostgres18IsRefused(t *testing.T) {
	e := newEnvOn(t, postgresOf(t, 18))
	e.declare(true, "#")
	c, w := e.consume(e.queue), newWriter(t, e.pgURL, 1)
	e.runOnceAndStop(c, w)

	e.exec(`ALTER SYSTEM SET idle_replication_slot_timeout = 1`) // seconds, the least it takes
	e.exec(`SELECT pg_reload_conf()`)
	deadline := time.Now().Add(30 * time.Second)
	for e.scalar(`SELECT coalesce(invalidation_reason, '') FROM pg_replication_slots WHERE slot_name = $1`, e.slot) != "idle_timeout" {
		if time.Now().After(deadline) {
			t.Fatalf("PostgreSQL did not invalidate the idle slot within 30 s of checkpoints")
		}
		time.Sleep(1100 * time.Millisecond)
		e.exec(`CHECKPOINT`)
	}
	e.exec(`ALTER SYSTEM RESET idle_replication_slot_timeout`)
	e.exec(`SELECT pg_reload_conf()`)

	e.expectRefusal("invalidation_reason idle_timeout")
	e.expectRefusal("cdc-router reset --slot " + e.slot)
	if out, code := e.cli("reset", "--slot", e.slot); code != 0 {
		t.Fatalf("reset: exit %d: %s", code, out)
	}
	e.runOnceAndStop(c, w)
}

// TestDroppedPublicationIsRefused: a publication dropped under a streaming router. PostgreSQL 18 no longer
// fails the stream: it warns "skipped loading publication" and streams on without it, so the outbox's rows
// would be lost without a word; earlier versions fail the stream with 42704. Either way the router must exit
// with a refusal naming the fix, refuse again when only the publication is recreated (the WAL written
// meanwhile still decodes without it), and the fix it names (migrate, reset, run) must deliver every row,
// those inserted while the publication was missing too. Run on PostgreSQL 18 and on the suite's version.
func TestDroppedPublicationIsRefused(t *testing.T) {
	t.Run("PostgreSQL 18", func(t *testing.T) {
		droppedPublication(t, newEnvOn(t, postgresOf(t, 18)), "skipped loading publication")
	})
	t.Run("the suite's PostgreSQL", func(t *testing.T) {
		var major int
		e := newEnv(t)
		if err := e.db.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int / 10000`).Scan(&major); err != nil {
			t.Fatal(err)
		}
		want := `publication "cdc_router_outbox" does not exist`
		if major >= 18 {
			want = "skipped loading publication"
		}
		droppedPublication(t, e, want)
	})
}

func droppedPublication(t *testing.T, e *env, want string) {
	e.declare(true, "#")
	c, w := e.consume(e.queue), newWriter(t, e.pgURL, 5)
	r := e.startStreaming()
	w.write(20, 5, 0)
	c.waitFor(t, w.rows, 20*time.Second)

	e.exec(`DROP PUBLICATION cdc_router_outbox`)
	w.write(20, 5, 0)
	if code := r.wait(30 * time.Second); code == 0 {
		t.Fatalf("the router exited 0 after its publication was dropped:\n%s", tail(r.Output(), 20))
	}
	for _, want := range []string{want, "cdc-router migrate", "cdc-router reset --slot " + e.slot} {
		if !strings.Contains(r.Output(), want) {
			t.Fatalf("the refusal does not say %q:\n%s", want, tail(r.Output(), 10))
		}
	}
	t.Logf("refused: %s", tail(strings.TrimSpace(r.Output()), 1))

	if out, code := e.cli("migrate"); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, out)
	}
	// The recreated publication is a publication gap (a new publication oid) as well: refused before the
	// stream would refuse it; reset forgets both. Before PostgreSQL 18 the changes written while the
	// publication was missing cannot be decoded, so reset cannot count what the slot holds and refuses
	// without --force; PostgreSQL 18 decodes them without it.
	e.expectRefusal("may have been out of publication")
	if out, code := e.cli("reset", "--slot", e.slot); code != 0 && !strings.Contains(out, "--force") {
		t.Fatalf("reset: exit %d, want 0 or a refusal naming --force: %s", code, out)
	}
	if out, code := e.cli("reset", "--slot", e.slot, "--force"); code != 0 {
		t.Fatalf("reset --force: exit %d: %s", code, out)
	}
	e.startStreaming()
	w.write(20, 5, 0)
	expectEveryEventInOrder(t, c, w, "after migrate, reset and run", 30*time.Second)
}
