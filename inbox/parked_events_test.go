package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// gapLab is an order whose versions 2 and 3 never arrive (dead-lettered, say): version 1 applies, 4
// and 5 park. Its handler adds each delta without insisting on the previous version, since resolving
// the gap applies 4 over 1 on purpose.
func gapLab(t *testing.T) (*lab, *inbox.Processor, []inbox.Event) {
	l := newLab(t)
	add := func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		var body struct{ Delta int64 }
		if err := json.Unmarshal(ev.Payload, &body); err != nil {
			return inbox.Permanent(err)
		}
		_, err := tx.Exec(ctx, `INSERT INTO projection AS p (id, amount, version) VALUES ($1, $2, $3)
			ON CONFLICT (id) DO UPDATE SET amount = p.amount + EXCLUDED.amount, version = EXCLUDED.version`,
			ev.AggregateID, body.Delta, ev.AggregateVersion)
		return err
	}
	p, err := inbox.New(l.DB, add, inbox.Config{Consumer: "orders-projection"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var evs []inbox.Event
	for v := int64(1); v <= 5; v++ {
		evs = append(evs, order("42", v, v*10))
	}
	want(t, "v1", l.processOK(p, evs[0]).Outcome, inbox.Applied)
	want(t, "v4", l.processOK(p, evs[3]).Outcome, inbox.Parked)
	want(t, "v5", l.processOK(p, evs[4]).Outcome, inbox.Parked)
	return l, p, evs
}

// ParkedEvents lists the parked events with the gap before each; RetryParked leaves an event whose gap
// is open as it is; ResolveParked skips the missing versions and applies the event and the one after
// it in one transaction; a missing version arriving afterwards is not applied but recorded as failed
// (reason skipped), never silently Stale (issue 35).
func TestParkedEventsRetryAndResolve(t *testing.T) {
	l, p, evs := gapLab(t)
	parked, err := p.ParkedEvents(l.Ctx, 10)
	if err != nil || len(parked) != 2 {
		t.Fatalf("ParkedEvents = %+v, %v; want two", parked, err)
	}
	want(t, "first parked", parked[0].Event.ID, evs[3].ID)
	want(t, "its applied version", parked[0].Applied, 1)
	want(t, "its missing versions", parked[0].Missing(), 2)
	want(t, "trace header kept", parked[0].Event.Headers["trace_id"], "t-1")
	want(t, "commit LSN kept", parked[0].Event.CommitLSN, evs[3].CommitLSN)

	res, err := p.RetryParked(l.Ctx, evs[3].ID)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "retry with the gap open", res, inbox.Result{Outcome: inbox.Parked, Version: 1})
	want(t, "amount after the retry", l.Amount("42"), 10)

	res, err = p.ResolveParked(l.Ctx, evs[3].ID, "versions 2 and 3 were dead-lettered: ticket 9")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "resolve", res, inbox.Result{Outcome: inbox.Applied, Version: 5, Unparked: 2})
	want(t, "amount", l.Amount("42"), 10+40+50)
	if left, _ := p.ParkedEvents(l.Ctx, 10); len(left) != 0 {
		t.Errorf("parked after the resolve: %+v", left)
	}
	want(t, "late v2", l.processOK(p, evs[1]).Outcome, inbox.Failed)
	want(t, "amount after late v2", l.Amount("42"), 100)
	want(t, "late v2 recorded", l.Count(`SELECT count(*) FROM inbox.failed WHERE event_id = $1 AND reason = 'skipped'`, evs[1].ID), 1)
	want(t, "late v2 again", l.processOK(p, evs[1]).Outcome, inbox.Failed)
	want(t, "one record, two attempts", l.Count(`SELECT attempts FROM inbox.failed WHERE event_id = $1`, evs[1].ID), 2)
	want(t, "v5 again", l.processOK(p, evs[4]).Outcome, inbox.Duplicate)

	if _, err := p.RetryParked(l.Ctx, evs[3].ID); !errors.Is(err, inbox.ErrParkedNotFound) {
		t.Errorf("RetryParked of an applied event: %v, want ErrParkedNotFound", err)
	}
	if _, err := p.ResolveParked(l.Ctx, "no-such-id", ""); !errors.Is(err, inbox.ErrParkedNotFound) {
		t.Errorf("ResolveParked of an unknown id: %v, want ErrParkedNotFound", err)
	}
}

// Resolving the later of two parked events skips up to it: the earlier one becomes stale, never applied.
func TestResolveParkedSkipsEarlierParkedEvents(t *testing.T) {
	l, p, evs := gapLab(t)
	res, err := p.ResolveParked(l.Ctx, evs[4].ID, "")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "resolve v5", res, inbox.Result{Outcome: inbox.Applied, Version: 5, Unparked: 1})
	want(t, "amount", l.Amount("42"), 10+50)
	want(t, "v4 stale", l.Count(`SELECT count(*) FROM inbox.inbox WHERE event_id = $1 AND status = 'stale'`, evs[3].ID), 1)
	if left, _ := p.ParkedEvents(l.Ctx, 10); len(left) != 0 {
		t.Errorf("parked after the resolve: %+v", left)
	}
}
