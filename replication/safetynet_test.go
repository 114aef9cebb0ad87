package replication

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
)

// named is the streamed event of outbox id id, at a position of its own.
func named(id string) cdc.Event {
	lsn := cdc.LSN(100 + 10*len(id) + int(id[0]))
	return cdc.Event{ID: id, LSN: lsn, CommitLSN: lsn + 5}
}

// refusal is a publisher error as route.ClosedError reports it.
type refusal struct{ per bool }

func (r refusal) Error() string    { return fmt.Sprintf("closed (per message %v)", r.per) }
func (r refusal) PerMessage() bool { return r.per }

func TestSafetyNetQuarantinesOnlyRepeatedPerMessageRefusals(t *testing.T) {
	perMsg := fmt.Errorf("publish: lane 1: %w", refusal{per: true})
	transient := fmt.Errorf("publish: lane 1: %w", refusal{per: false})
	plain := errors.New("publish: confirm timed out") // no PerMessage: transient
	ev := func(id string, lsn cdc.LSN) cdc.Event { return cdc.Event{ID: id, LSN: lsn} }

	n := newSafetyNet(0)
	n.received = 100
	if n.careful(ev("a", 50)) {
		t.Fatal("careful before any refusal")
	}
	if n.failed(plain) || n.failed(transient) {
		t.Fatal("a transient error or close counted as a per-message refusal")
	}
	if n.until != 0 {
		t.Fatalf("until = %v after transient failures, want 0", n.until)
	}
	// A pipelined run fails: no event was alone in flight, so nobody gets a strike.
	if !n.failed(perMsg) {
		t.Fatal("per-message refusal not recognised")
	}
	if n.until != 100 || !n.careful(ev("a", 100)) || n.careful(ev("b", 101)) || n.careful(ev("snap", 0)) {
		t.Fatalf("careful range wrong: until %v", n.until)
	}
	for strike := 1; strike <= strikesToQuarantine; strike++ {
		if _, ok := n.condemned(named("a")); ok {
			t.Fatalf("condemned after %d strikes", strike-1)
		}
		n.alone = offsets.Refused(named("a"))
		n.failed(perMsg)
		// A transient failure between strikes neither counts nor forgives.
		n.alone = offsets.Refused(named("a"))
		n.failed(transient)
	}
	reason, ok := n.condemned(named("a"))
	if !ok || reason != perMsg.Error() {
		t.Fatalf("condemned(a) = %q, %v after %d strikes", reason, ok, strikesToQuarantine)
	}
	if _, ok := n.condemned(named("b")); ok {
		t.Fatal("another event condemned")
	}
	n.alone = offsets.Refused(named("b"))
	n.failed(perMsg)
	n.cleared(offsets.Refused(named("b")))
	if k, _ := n.strikes.Struck(offsets.Refused(named("b")).Key()); k != 0 {
		t.Fatal("a confirm did not clear the strikes")
	}
	// The range only grows.
	n.received = 10
	n.failed(perMsg)
	if n.until != 100 {
		t.Fatalf("until went back to %v", n.until)
	}
}

// settling is a publisher error as route.PublishError reports a nack or a return from an exchange of its own.
type settling struct{}

func (settling) Error() string     { return "publish event r: returned by the broker (312 NO_ROUTE)" }
func (settling) PerMessage() bool  { return true }
func (settling) BrokerState() bool { return true }

// TestSafetyNetRetriesReturnsForThePeriod: a return or a nack makes the replay careful like a close, but
// its event is condemned only once the refusal period has passed since its first strike, however many
// strikes came before.
func TestSafetyNetRetriesReturnsForThePeriod(t *testing.T) {
	n := newSafetyNet(time.Hour)
	n.received = 100
	for range 10 {
		n.alone = offsets.Refused(named("r"))
		if !n.failed(settling{}) {
			t.Fatal("a return did not make the replay careful")
		}
	}
	if _, ok := n.condemned(named("r")); ok {
		t.Fatal("a return condemned before the refusal period passed")
	}
	if k, _ := n.strikes.Struck(offsets.Refused(named("r")).Key()); k != 10 {
		t.Fatalf("%d strikes, want 10", k)
	}
	n = newSafetyNet(time.Nanosecond)
	for range strikesToQuarantine {
		n.alone = offsets.Refused(named("r"))
		n.failed(settling{})
	}
	time.Sleep(time.Millisecond)
	if reason, ok := n.condemned(named("r")); !ok || !strings.Contains(reason, "NO_ROUTE") || !strings.Contains(reason, "retried 3 times") {
		t.Fatalf("condemned(r) = %q, %v after the period", reason, ok)
	}
}

// TestSafetyNetTriesAgainAfterAnOutage: a nack or a return refused its event three times, then something
// else (a PostgreSQL restart, a memory alarm) kept the stream from the event until the refusal period was
// over. The event is not condemned by the time that passed: it is tried again, and only a refusal then
// condemns it (the chaos harness's seed 583: a valid row quarantined 20 s after its queue's policy was
// cleared, without a new try).
func TestSafetyNetTriesAgainAfterAnOutage(t *testing.T) {
	n := newSafetyNet(50 * time.Millisecond)
	n.received = 100
	for range strikesToQuarantine {
		n.alone = offsets.Refused(named("r"))
		n.failed(settling{})
	}
	time.Sleep(100 * time.Millisecond)
	if reason, ok := n.condemned(named("r")); ok {
		t.Fatalf("condemned(r) = %q after the period without a try in it", reason)
	}
	n.alone = offsets.Refused(named("r"))
	n.failed(settling{})
	if reason, ok := n.condemned(named("r")); !ok || !strings.Contains(reason, "retried 4 times") {
		t.Fatalf("condemned(r) = %q, %v after a refusal past the period", reason, ok)
	}
}

// TestSafetyNetAdoptsTheSlotsRecord: each run starts from the slot's stored record (offsets.Refusal),
// whichever process wrote it: the position up to which events go one at a time, and the strikes of the
// record's event, which condemn that event, and only it, once there are strikesToQuarantine of them; a
// record of an event whose transaction ended before the run's start is spent, and a record without an event
// drops what this process counted.
func TestSafetyNetAdoptsTheSlotsRecord(t *testing.T) {
	closeErr := fmt.Errorf("publish: %w", refusal{per: true})
	big := named("big")
	stored := func(ev cdc.Event, n int) offsets.Refusal {
		at := time.Unix(1e9, 0)
		return offsets.Refusal{Until: ev.LSN + 40, Event: offsets.Refused(ev), Strikes: n, First: at, Last: at.Add(time.Second),
			Reason: closeErr.Error()}
	}
	for _, tc := range []struct {
		name      string
		mine      int // strikes this process counted against big before the run
		record    offsets.Refusal
		start     cdc.LSN
		condemned bool // big is condemned at the run's start
		until     cdc.LSN
	}{
		{name: "the other process's three strikes", record: stored(big, 3), start: 1, condemned: true, until: big.LSN + 40},
		{name: "two strikes", record: stored(big, 2), start: 1, until: big.LSN + 40},
		{name: "two strikes here, one in the record", mine: 2, record: stored(big, 1), start: 1, until: big.LSN + 40},
		{name: "another event's strikes", mine: 3, record: stored(named("other"), 3), start: 1, until: named("other").LSN + 40},
		{name: "no event in the record", mine: 3, record: offsets.Refusal{Until: 7}, start: 1, until: 7},
		{name: "spent: its transaction ended before the start", record: stored(big, 3), start: big.CommitLSN + 1,
			until: big.LSN + 40},
		{name: "the event's position makes it careful", record: offsets.Refusal{Event: offsets.Refused(big), Strikes: 1,
			First: time.Unix(1, 0), Last: time.Unix(1, 0), Reason: "r"}, start: 1, until: big.LSN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newSafetyNet(0)
			n.received = 1
			for range tc.mine {
				n.alone = offsets.Refused(big)
				n.failed(closeErr)
			}
			n.adopt(tc.record, tc.start)
			if _, ok := n.condemned(big); ok != tc.condemned {
				t.Errorf("condemned = %v, want %v", ok, tc.condemned)
			}
			if n.until != tc.until {
				t.Errorf("until = %v, want %v", n.until, tc.until)
			}
			if !tc.record.Event.Zero() && tc.start <= tc.record.Event.CommitLSN && !n.careful(big) && tc.record.Event == offsets.Refused(big) {
				t.Error("the record's event is not published alone")
			}
			if _, ok := n.condemned(named("third")); ok {
				t.Error("an event without strikes condemned")
			}
		})
	}
}

// TestSafetyNetStrikesTakeTurns: two processes of one slot take turns, each refusal ending the active
// one's run and the other taking over. With the strikes in the slot's record, which each run adopts and
// each strike replaces (offsets.Store.Strike: one more for the same event), the third refusal condemns the
// event, whichever process sees it: it is quarantined at the fifth run. Counted per process (no record),
// each process needs its own pipelined try and three strikes: not within eight runs (the ninth).
func TestSafetyNetStrikesTakeTurns(t *testing.T) {
	closeErr := fmt.Errorf("publish: %w", refusal{per: true})
	big := named("big")
	for _, withRecord := range []bool{true, false} {
		nets := [2]*safetyNet{newSafetyNet(0), newSafetyNet(0)}
		var record offsets.Refusal // the slot's stored record, as offsets.Store.Strike writes it
		condemnedAt := 0
		for turn := 1; turn <= 8 && condemnedAt == 0; turn++ {
			n := nets[turn%2]
			if withRecord {
				n.adopt(record, 1)
			}
			n.received = big.LSN + 10
			if _, ok := n.condemned(big); ok {
				condemnedAt = turn
				break
			}
			if n.careful(big) {
				n.alone = offsets.Refused(big)
			}
			if withRecord {
				if !n.alone.Zero() {
					if record.Event != n.alone {
						record.Event, record.Strikes, record.First = n.alone, 0, time.Unix(int64(turn), 0)
					}
					record.Strikes++
					record.Last, record.Reason = time.Unix(int64(turn), 0), closeErr.Error()
				}
				record.Until = max(record.Until, n.received)
				n.adopt(record, 0)
				n.alone = offsets.RefusedEvent{}
			}
			n.failed(closeErr)
		}
		switch {
		case withRecord && condemnedAt != 5:
			t.Errorf("with the slot's record: condemned at turn %d, want 5 (after a pipelined try and three strikes)", condemnedAt)
		case !withRecord && condemnedAt != 0:
			t.Errorf("per process: condemned at turn %d within 8 turns; the test's model of today's net is wrong", condemnedAt)
		}
	}
}
