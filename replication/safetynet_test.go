package replication

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

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
		if _, ok := n.condemned("a"); ok {
			t.Fatalf("condemned after %d strikes", strike-1)
		}
		n.alone = "a"
		n.failed(perMsg)
		// A transient failure between strikes neither counts nor forgives.
		n.alone = "a"
		n.failed(transient)
	}
	reason, ok := n.condemned("a")
	if !ok || reason != perMsg.Error() {
		t.Fatalf("condemned(a) = %q, %v after %d strikes", reason, ok, strikesToQuarantine)
	}
	if _, ok := n.condemned("b"); ok {
		t.Fatal("another event condemned")
	}
	n.alone = "b"
	n.failed(perMsg)
	n.cleared("b")
	if k, _ := n.strikes.Struck("b"); k != 0 {
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
		n.alone = "r"
		if !n.failed(settling{}) {
			t.Fatal("a return did not make the replay careful")
		}
	}
	if _, ok := n.condemned("r"); ok {
		t.Fatal("a return condemned before the refusal period passed")
	}
	if k, _ := n.strikes.Struck("r"); k != 10 {
		t.Fatalf("%d strikes, want 10", k)
	}
	n = newSafetyNet(time.Nanosecond)
	for range strikesToQuarantine {
		n.alone = "r"
		n.failed(settling{})
	}
	time.Sleep(time.Millisecond)
	if reason, ok := n.condemned("r"); !ok || !strings.Contains(reason, "NO_ROUTE") || !strings.Contains(reason, "retried 3 times") {
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
		n.alone = "r"
		n.failed(settling{})
	}
	time.Sleep(100 * time.Millisecond)
	if reason, ok := n.condemned("r"); ok {
		t.Fatalf("condemned(r) = %q after the period without a try in it", reason)
	}
	n.alone = "r"
	n.failed(settling{})
	if reason, ok := n.condemned("r"); !ok || !strings.Contains(reason, "retried 4 times") {
		t.Fatalf("condemned(r) = %q, %v after a refusal past the period", reason, ok)
	}
}
