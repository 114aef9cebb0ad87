package check

import (
	"testing"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// An emitted event is held to what a row is: delivered, or excused only when it was emitted while no slot
// existed (it is in the WAL only).
func TestEmittedEventMustBePublishedOnceASlotExists(t *testing.T) {
	h := clean()
	h.Rows[2].Emitted = true
	h.Deliv = h.Deliv[:2]
	h.Logs = []LogLine{{At: at(0.5), Router: 0, Text: "level=INFO msg=streaming slot=s"}}
	broken(t, h, "published-or-quarantined", "LOST")
	h.Logs[0].At = at(2.5)
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("an event emitted before any slot: %v", vs)
	}
}

// A message from a role without the right to emit is never published, at least one of them is quarantined
// as unauthenticated, and that role's call of emit is refused.
func TestForgedMessagesNeverPublished(t *testing.T) {
	h := clean()
	h.Logs = []LogLine{{At: at(0), Router: 0, Text: "level=INFO msg=streaming slot=s"}}
	h.End = at(30)
	h.Rows = append(h.Rows, Row{ID: "f", Aggregate: "order/1", Version: 1_000_001, Forged: true, Op: gen.OpForged, Committed: at(4)})
	h.Quar = []Quarantined{{Reason: "message:cdc-router.outbox: unauthenticated emitted message: it carries no MAC (one record for 2 such messages …)"}}
	h.Events = []Event{{From: at(5), To: at(5), Kind: KindIntruderEmit, Note: "refused: ERROR: permission denied for function emit"}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	h.Deliv = append(h.Deliv, Delivery{At: at(4.1), MessageID: "f", Aggregate: "order/1", Version: 1_000_001})
	broken(t, h, "unauthenticated-never-published", "unauthenticated emitted message f (order/1 v1000001) was published")
	h.Deliv = h.Deliv[:3]
	h.Quar = nil
	broken(t, h, "unauthenticated-never-published", `no quarantine record says "unauthenticated emitted message"`)
	h.Rows[3].Committed = at(25) // too close to the end to require its record
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	// A call whose connection PostgreSQL ended (a restart) got no verdict; any other outcome is a violation.
	h.Events[0].Note = "failed otherwise: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)"
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a call cut by a restart: %v", vs)
	}
	h.Events[0].Note = "failed otherwise: ERROR: function cdc_router.emit does not exist (SQLSTATE 42883)"
	broken(t, h, "unauthenticated-never-published", "a role without EXECUTE on emit called it")
	h.Events[0].Note = "succeeded: emit returned f"
	broken(t, h, "unauthenticated-never-published", "a role without EXECUTE on emit called it")
	// A call whose connection a PostgreSQL restart terminated has no outcome; any other failure is no refusal.
	h.Events[0].Note = "failed otherwise: FATAL: terminating connection due to administrator command (SQLSTATE 57P01)"
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a call cut by a restart: %v", vs)
	}
	h.Events[0].Note = "failed otherwise: ERROR: function cdc_router.emit raised an exception (SQLSTATE P0001)"
	broken(t, h, "unauthenticated-never-published", "a role without EXECUTE on emit called it")
}

// A broker outage's stall ends with it: rows pending at its end start arriving within the stall bound.
func TestBrokerOutageEndsItsStall(t *testing.T) {
	h := clean()
	h.Events = []Event{{From: at(0.5), To: at(1.5), Kind: gen.FaultMemAlarm}}
	h.Deliv[1].At, h.Deliv[2].At = at(6), at(6.1) // 4.5 s after the alarm, within the 5 s bound
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	h.Deliv[1].At, h.Deliv[2].At = at(7), at(7.1)
	h.End = at(20)
	broken(t, h, "broker-outage-bounded", "memory-alarm from +0.50s to +1.50s ended with 1 rows pending; the next first delivery came 5.5s later")
	h.Deliv = h.Deliv[:1]
	broken(t, h, "broker-outage-bounded", "came never")
	// A publication gap right after it: the stall is the gap's too.
	h.Events = append(h.Events, Event{From: at(3), To: at(3.5), Kind: gen.FaultPubGap})
	for _, v := range Check(h, limits) {
		if v.Invariant == "broker-outage-bounded" {
			t.Fatalf("an outage followed by a gap: %v", v)
		}
	}
}

// A poison row fixed in place and replayed arrives once, marked x-replayed and out of order; a record marked
// replayed whose event never came is a loss.
func TestReplayPublishesWhatItMarks(t *testing.T) {
	h := clean()
	h.Rows[1].Poison = true
	h.Quar = []Quarantined{{ID: 7, EventID: "b", Reason: "headers is not a JSON object", Handled: "replayed"}}
	h.Deliv = []Delivery{h.Deliv[0], h.Deliv[2], {At: at(4), MessageID: "b", Aggregate: "order/1", Version: 2, Replayed: true}}
	h.Events = []Event{{From: at(3.5), To: at(4.5), Kind: gen.CmdReplay, Note: "exit 0"}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	h.Deliv[2].Replayed = false // the stream published the poison row
	broken(t, h, "published-or-quarantined", "which the router must refuse, was published")
	h.Deliv = h.Deliv[:2]
	broken(t, h, "replayed-is-published", "quarantine record 7 (event b) is marked replayed, but its event never arrived")
	h.Quar[0].Handled = "" // the replay succeeded, the record stays open, and the row it fixed never came
	h.Events[0].IDs = []string{"b"}
	h.Events[0].Note = "1 fixed: exit 0"
	broken(t, h, "replayed-is-published", "event b, its row fixed, was replayed at +3.50s but never arrived replayed")
	// Seed 367: each try of the replay failed (a broker restart), so the row stays quarantined, its record
	// open, as invariant 1 allows.
	h.Events[0].Note = "1 fixed: exit 1: cdc-router quarantine replay: publish record 7: connection refused"
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a fixed row whose replay failed, its record open: %v", vs)
	}
}

// TestQuarantinedThenStreamedIsOutOfOrder: seed 367: v2 was quarantined (its per-topic exchange deleted),
// v3 went on; the stream, restarted from before both once the exchange was back, published v2 and v3
// again. v2's first delivery is after v3's by design (it was quarantined first); the same delivery of a row
// never quarantined before is out of order.
func TestQuarantinedThenStreamedIsOutOfOrder(t *testing.T) {
	h := clean()
	h.Quar = []Quarantined{{ID: 3, EventID: "b", Reason: `event cannot be published: exchange "x.mapped" does not exist`, At: at(1.2)}}
	h.Deliv = []Delivery{h.Deliv[0], h.Deliv[2],
		{At: at(4.2), MessageID: "b", Aggregate: "order/1", Version: 2},
		{At: at(4.3), MessageID: "c", Aggregate: "order/1", Version: 3}}
	h.Events = []Event{{From: at(3), To: at(3.5), Kind: gen.FaultKill}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a row quarantined, then streamed again: %v", vs)
	}
	h.Quar[0].At = at(4.5) // quarantined after it was delivered: the stream sent v2 after v3
	broken(t, h, "order-per-aggregate", "version 2 first delivered at +4.20s after version 3")
}

// A poison row fixed in place by a replay may then be copied by a backfill (seed 24: `backfill --where true`
// after the replay); a backfill's copy before the fix is the poison row published.
func TestBackfillCopiesAFixedPoisonRow(t *testing.T) {
	h := clean()
	h.Rows[1].Poison = true
	h.Quar = []Quarantined{{ID: 7, EventID: "b", Reason: "headers is not a JSON object", Handled: "replayed"}}
	h.Deliv = []Delivery{h.Deliv[0], h.Deliv[2], {At: at(4), MessageID: "b", Aggregate: "order/1", Version: 2, Replayed: true},
		{At: at(6), MessageID: "b", Aggregate: "order/1", Version: 2, Backfill: true}}
	h.Events = []Event{{From: at(3.5), To: at(4.5), Kind: gen.CmdReplay, Note: "exit 0", IDs: []string{"b"}},
		{From: at(5), To: at(7), Kind: gen.CmdBackfill, Note: "exit 0"}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("violations: %v", vs)
	}
	h.Deliv[3].At = at(3)
	broken(t, h, "published-or-quarantined", "which the router must refuse, was published")

	// Seed 7002: one backfill run (one commit_lsn) quarantined b and sent c; the operator fixed b and
	// replayed it; the run, resumed after a cut, started its pass again and copied b fixed, after c.
	h.Deliv = []Delivery{h.Deliv[0], h.Deliv[2],
		{At: at(5.1), MessageID: "a", Aggregate: "order/1", Version: 1, Backfill: true, CommitLSN: "0/9"},
		{At: at(5.2), MessageID: "c", Aggregate: "order/1", Version: 3, Backfill: true, CommitLSN: "0/9"},
		{At: at(5.5), MessageID: "b", Aggregate: "order/1", Version: 2, Replayed: true},
		{At: at(6.1), MessageID: "a", Aggregate: "order/1", Version: 1, Backfill: true, CommitLSN: "0/9"},
		{At: at(6.2), MessageID: "b", Aggregate: "order/1", Version: 2, Backfill: true, CommitLSN: "0/9"}}
	h.Events = []Event{{From: at(5), To: at(7), Kind: gen.CmdBackfill, Note: "exit 0"},
		{From: at(5.4), To: at(5.6), Kind: gen.CmdReplay, Note: "exit 0", IDs: []string{"b"}}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a run's copy of a poison row fixed during it: %v", vs)
	}
	h.Rows[1].Poison = false // a valid row the run skipped and sent late is out of its order
	h.Quar = nil
	broken(t, h, "order-per-aggregate", "sent version 2 at +6.20s after its version 3")
}

// TestReplayedEventIsDeliveredFirst: a poison row fixed and replayed (x-replayed) and then copied again by
// the initial snapshot of a slot made after a reset, once later versions of its aggregate went out: the
// copy is a duplicate of the replay's delivery, not a first delivery out of order (seed 793).
func TestReplayedEventIsDeliveredFirst(t *testing.T) {
	h := clean()
	h.Rows[1].Poison = true
	h.Quar = []Quarantined{{EventID: "b", Reason: "headers is not a JSON object", Handled: "replayed", At: at(1.2)}}
	h.Events = []Event{{From: at(4), To: at(4.1), Kind: gen.CmdReplay, IDs: []string{"b"}, Note: "1 fixed: exit 0"},
		{From: at(4.5), To: at(4.6), Kind: gen.CmdResetIdle, Note: "exit 0: reset: slot s dropped"}}
	h.Deliv = []Delivery{{At: at(0.1), MessageID: "a", Aggregate: "order/1", Version: 1},
		{At: at(2.1), MessageID: "c", Aggregate: "order/1", Version: 3},
		{At: at(4.2), MessageID: "b", Aggregate: "order/1", Version: 2, Replayed: true},
		{At: at(5), MessageID: "a", Aggregate: "order/1", Version: 1, Backfill: true},
		{At: at(5), MessageID: "b", Aggregate: "order/1", Version: 2, Backfill: true},
		{At: at(5), MessageID: "c", Aggregate: "order/1", Version: 3, Backfill: true}}
	for _, v := range Check(h, limits) {
		if v.Invariant == "order-per-aggregate" {
			t.Fatalf("a snapshot's copy of a replayed event: %v", v)
		}
	}
	h.Deliv[2].Replayed = false // not the replay's: then the stream sent v2 after v3
	h.Quar[0].At = at(4.3)      // and b's quarantine came after that delivery (TestQuarantinedThenStreamedIsOutOfOrder)
	broken(t, h, "order-per-aggregate", "version 2 first delivered at +4.20s after version 3")
}
