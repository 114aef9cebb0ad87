package check

import (
	"testing"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// TestRetireRefusesTransactionsInFlight: migrate --retire-emit-keys with an open and a prepared transaction
// that emitted with the old key must refuse naming both, must retire once they committed, and a transaction
// begun before the rotation must still emit after it (issue 35, finding 2).
func TestRetireRefusesTransactionsInFlight(t *testing.T) {
	names := []string{"pid 4242 (", "prepared transaction 'chaos_db_1'"}
	refused := "exit 1: cdc-router migrate: cannot retire the emit keys older than key 2 yet: pid 4242 (transaction began …) " +
		"and prepared transaction 'chaos_db_1' may carry events signed with them; commit or roll them back, or run with --wait"
	h := clean()
	h.Events = []Event{
		{From: at(1), To: at(1.2), Kind: gen.CmdRetireInFlight, IDs: names, Note: refused},
		{From: at(1.5), To: at(2), Kind: KindRetireAfter, Note: "exit 0: retired: emit keys 1; key 2 signs"},
		{From: at(2.1), To: at(2.2), Kind: KindLateEmit, Note: "committed"},
	}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a refusal, then the retirement: %v", vs)
	}
	h.Events[0].Note = "exit 0: retired: emit keys 1; key 2 signs" // the loss of issue 35: retired under them
	broken(t, h, "retire-refuses-transactions-in-flight", "retired the old keys with pid 4242 ( and prepared transaction")
	h.Events[0].Note = "exit 1: cdc-router migrate: cannot retire …: pid 4242 (transaction began …)" // the prepared one unnamed
	broken(t, h, "retire-refuses-transactions-in-flight", "did not refuse naming prepared transaction 'chaos_db_1'")
	h.Events[0].Note = refused
	h.Events[1].Note = "exit 1: cdc-router migrate: cannot retire … give --wait more time"
	broken(t, h, "retire-refuses-transactions-in-flight", "once its transactions in flight had committed did not retire")
	h.Events[1].Note = "exit 0: retired: emit keys 1; key 2 signs"
	h.Events[2].Note = "failed: ERROR: cdc_router.emit_keys holds no active key (SQLSTATE P0001)"
	broken(t, h, "retire-refuses-transactions-in-flight", "could not emit after its retirement")
	// Waited while they committed: it must end after their commit, retired.
	h = clean()
	h.Events = []Event{{From: at(1), To: at(3), Kind: gen.CmdRetireInFlight, Note: "exit 0: waiting up to 20s: … retired: emit keys 1; key 2 signs"}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a retirement that waited for the commits: %v", vs)
	}
	h.Events[0].IDs = names // it ended before they committed
	broken(t, h, "retire-refuses-transactions-in-flight", "retired the old keys with pid 4242")
	h.Events[0].Note = "skipped: a router did not reload its emit keys within 30 s of the rotation"
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a skipped retirement: %v", vs)
	}
}
