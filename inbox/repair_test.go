package inbox_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// snapshotOf returns a RepairFunc writing the order's full state at version v with amount.
func snapshotOf(id string, v, amount int64) inbox.RepairFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO projection (id, amount, version) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET amount = EXCLUDED.amount, version = EXCLUDED.version`, id, amount, v)
		return err
	}
}

// Scenario 5: conditional snapshot repair racing the normal stream. The source is at version 3 with
// amount 60 (E1 +10, E2 +20, E3 +30); the consumer has E1 and E2.
func TestConditionalSnapshotRepair(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	repair := func(observed, source, amount int64) inbox.RepairResult {
		t.Helper()
		res, err := p.Repair(l.Ctx, inbox.Snapshot{AggregateType: "order", AggregateID: "42",
			Observed: observed, Source: source}, snapshotOf("42", source, amount))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	e1, e2, e3, e4, e5 := order("42", 1, 10), order("42", 2, 20), order("42", 3, 30), order("42", 4, 40), order("42", 5, 50)
	ch := l.Channel()
	deliver := func(ev inbox.Event) inbox.Result {
		t.Helper()
		l.Publish(ev)
		d := l.Get(ch)
		res := l.Process(p, d)
		if !res.Outcome.Ack() {
			t.Fatalf("event %d: outcome %v is not acknowledged", ev.AggregateVersion, res.Outcome)
		}
		d.Ack(false)
		return res
	}
	deliver(e1)
	observedEarly := int64(1) // a repairer read version 1, then the projection moved on
	deliver(e2)

	stale := repair(observedEarly, 3, 60)
	want(t, "repair over an outdated observation", stale.Repaired, false)
	want(t, "version after rejected repair", stale.Version, 2)
	want(t, "amount after rejected repair", l.Amount("42"), 30)

	st, err := p.State(l.Ctx, "order", "42")
	if err != nil {
		t.Fatal(err)
	}
	fresh := repair(st.Applied, 3, 60)
	want(t, "repair with a fresh observation", fresh.Repaired, true)
	want(t, "amount after snapshot 3", l.Amount("42"), 60)

	r4 := deliver(e4)
	want(t, "E4", r4.Outcome, inbox.Applied)
	want(t, "version after E4", r4.Version, 4)

	overwrite := repair(4, 3, 60)
	want(t, "snapshot 3 over version 4", overwrite.Repaired, false)
	want(t, "amount after refused overwrite", l.Amount("42"), 100)

	r3 := deliver(e3)
	want(t, "late E3", r3.Outcome, inbox.Stale)
	want(t, "late E3 recorded", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1 AND status = 'stale'`, e3.ID), 1)
	forged := e3
	forged.Payload = []byte(`{"delta": 999}`)
	rc := deliver(forged)
	want(t, "E3 with other content", rc.Outcome, inbox.Conflict)
	r5 := deliver(e5)
	want(t, "E5", r5.Outcome, inbox.Applied)

	final, err := p.State(l.Ctx, "order", "42")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "final state", final, inbox.AggregateState{Applied: 5, Baseline: 3})
	want(t, "amount", l.Amount("42"), 150)
	want(t, "projection version", l.Count(`SELECT version FROM projection WHERE id = '42'`), 5)
	want(t, "queue", l.Ready(), 0)
	summary(t, "observed=1 rejected(version=%d) snapshot=3 repaired=%v E4=%v(version=%d) overwrite-by-3=%v late-E3=%v E3-other-content=%v E5=%v applied=%d baseline=%d amount=%d",
		stale.Version, fresh.Repaired, r4.Outcome, r4.Version, overwrite.Repaired, r3.Outcome, rc.Outcome, r5.Outcome,
		final.Applied, final.Baseline, l.Amount("42"))
}

// A repair drops parked events it covers and applies the ones that follow it.
func TestRepairResolvesParkedEvents(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e2, e3, e5 := order("42", 2, 20), order("42", 3, 30), order("42", 5, 50)
	for _, ev := range []inbox.Event{e2, e3, e5} {
		res, err := p.Process(l.Ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		want(t, "outcome", res.Outcome, inbox.Parked)
	}
	res, err := p.Repair(l.Ctx, inbox.Snapshot{AggregateType: "order", AggregateID: "42", Observed: 0, Source: 4},
		snapshotOf("42", 4, 100))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "repaired", res.Repaired, true)
	want(t, "unparked", res.Unparked, 1)
	want(t, "version", res.Version, 5)
	want(t, "amount", l.Amount("42"), 150)
	want(t, "parked left", l.Count(`SELECT count(*) FROM inbox.parked`), 0)
	want(t, "stale rows", l.Count(`SELECT count(*) FROM inbox.inbox WHERE status = 'stale'`), 2)
	summary(t, "parked=3 snapshot=4 unparked=%d stale=2 version=%d amount=%d", res.Unparked, res.Version, l.Amount("42"))
}
