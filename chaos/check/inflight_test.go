package check

import (
	"testing"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// A reset with an open and a prepared transaction in flight refuses, naming both; one that exits 0, or
// refuses without naming one, breaks the rule.
func TestResetWithTransactionsInFlightMustRefuseNamingThem(t *testing.T) {
	names := []string{"(xid 812,", "gid 'chaos_db_1'"}
	refusal := "exit 1: cdc-router reset: slot s may still receive events from 2 transactions of database db that are open or prepared: " +
		"open transaction pid 4242 (xid 812, user postgres, idle in transaction, started 2026-12-01T12:00:01Z); " +
		"prepared transaction gid 'chaos_db_1' (xid 813, prepared 2026-12-01T12:00:01Z, owner postgres); reset waited 1s (--wait)"
	h := clean()
	h.Events = []Event{{From: at(1), To: at(2.2), Kind: gen.CmdResetInFlight, IDs: names, Note: refusal}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("the refusal naming both: %v", vs)
	}
	h.Events[0].Note = "exit 0: reset: slot s dropped"
	broken(t, h, "reset-refuses-transactions-in-flight", "succeeded, shown (xid 812, and gid 'chaos_db_1' in flight")
	h.Events[0].Note = "exit 1: cdc-router reset: slot s may still receive events from 1 transactions of database db that are open or prepared: " +
		"open transaction pid 4242 (xid 812, user postgres); reset waited 1s (--wait)"
	broken(t, h, "reset-refuses-transactions-in-flight", "without naming gid 'chaos_db_1'")
	h.Events[0].Note = "exit 2: flag provided but not defined: -wait"
	broken(t, h, "reset-refuses-transactions-in-flight", "otherwise than by a refusal")
	h.Events[0].Note = "skipped: connect: refused"
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a skipped reset: %v", vs)
	}
}

// Transactions committed while reset waited for them: it must refuse for the events they committed, which
// the stopped router has not published.
func TestResetAfterTransactionsCommittedDuringItsWaitMustRefuse(t *testing.T) {
	h := clean()
	h.Events = []Event{{From: at(1), To: at(2.5), Kind: gen.CmdResetInFlight,
		Note: "exit 1: cdc-router reset: slot s still holds 6 events (4 rows, 2 messages), past the router's acknowledged position 0/1"}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("the refusal for the unpublished events: %v", vs)
	}
	h.Events[0].Note = "exit 0: reset: slot s dropped"
	broken(t, h, "reset-refuses-transactions-in-flight", "succeeded, its transactions committed during its wait")
	h.Events[0].Note = "exit 1: cdc-router reset: replication slot s is a physical slot"
	broken(t, h, "reset-refuses-transactions-in-flight", "not for the unpublished events")
}
