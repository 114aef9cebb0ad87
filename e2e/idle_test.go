package e2e

import (
	"testing"
	"time"
)

// rowVersions samples the xmin of the slot's row in each of the router's tables every 100 ms for d and
// returns how many times each changed: each UPDATE gives the row a new xmin.
func (e *env) rowVersions(d time.Duration, tables ...string) []int {
	e.t.Helper()
	changes, last := make([]int, len(tables)), make([]string, len(tables))
	sample := func(i int) string {
		return e.scalar(`SELECT xmin::text FROM cdc_router.`+tables[i]+` WHERE slot = $1`, e.slot)
	}
	for i := range tables {
		last[i] = sample(i)
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		for i := range tables {
			if x := sample(i); x != last[i] {
				changes[i], last[i] = changes[i]+1, x
			}
		}
	}
	return changes
}

// TestIdleRouterWritesNothing: with nothing happening but the router's own writes, the router does not
// keep writing to PostgreSQL (its position write is WAL that the next keepalive reports): over ten idle
// seconds its stored position is updated at most once, its publication check record not at all beyond
// one refresh; the slot's confirmed_flush_lsn still follows the keepalives.
func TestIdleRouterWritesNothing(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.startStreaming("--publication-check-interval", "1s")
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	time.Sleep(3 * time.Second) // the position of the last transaction is stored
	n := e.rowVersions(10*time.Second, "positions", "publication_checks")
	positions, checks := n[0], n[1]
	t.Logf("10 idle seconds: %d updates of cdc_router.positions, %d of cdc_router.publication_checks", positions, checks)
	if positions > 1 {
		t.Errorf("%d updates of the stored position in 10 idle seconds, want at most 1", positions)
	}
	if checks > 1 {
		t.Errorf("%d updates of the publication check record in 10 idle seconds, want at most 1", checks)
	}
	// Status updates still report the keepalives' WAL end: another table's write moves the slot.
	before := e.scalar(`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot)
	e.exec(`INSERT INTO other (note) VALUES ('elsewhere')`)
	target := e.scalar(`SELECT pg_current_wal_lsn()::text`)
	deadline := time.Now().Add(30 * time.Second)
	for e.scalar(`SELECT (confirmed_flush_lsn >= $2::pg_lsn)::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot, target) != "true" {
		if time.Now().After(deadline) {
			t.Fatalf("confirmed_flush_lsn did not reach %s after another table's write (it was %s)", target, before)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
