package offsets

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
)

// TestStoreKeepsTheRefusalWithTheSlot: the safety net's record (migration 018) lives in the slot's row, so
// that any Store of the slot (another run, the other router of the slot) reads what the last wrote. A strike
// against the record's event adds one, keeping the first strike's time; a strike against another event
// replaces the record with that event's first; a strike with no event alone in flight only moves Until,
// which never goes back; a clear forgets only the named event's strikes and keeps Until; a position save
// leaves the record alone; without a stored position nothing is written; and each slot has its own record.
func TestStoreKeepsTheRefusalWithTheSlot(t *testing.T) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	a, b := NewStore(c, "cdc_router", "slot_a", 0), NewStore(c, "cdc_router", "slot_a", 0)
	big := RefusedEvent{CommitLSN: 0x300, LSN: 0x200, Ordinal: 1, ID: "e-big"}
	other := RefusedEvent{CommitLSN: 0x300, LSN: 0x200, Ordinal: 2, ID: "e-big"} // same id, another row
	if _, ok, err := a.Strike(ctx, 0x400, big, "406", false); ok || err != nil {
		t.Fatalf("Strike without a stored position = %v, %v", ok, err)
	}
	if err := a.Save(ctx, Position{LSN: 0x100, SystemID: "42", Timeline: 1}, true); err != nil {
		t.Fatal(err)
	}
	if err := NewStore(c, "cdc_router", "slot_b", 0).Save(ctx, Position{LSN: 0x100, SystemID: "42", Timeline: 1}, true); err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		name    string
		store   *Store
		until   cdc.LSN
		ev      RefusedEvent
		clear   bool
		event   RefusedEvent
		strikes int
		wantTil cdc.LSN
	}{
		{name: "pipelined refusal", store: a, until: 0x400, wantTil: 0x400},
		{name: "first strike", store: b, until: 0x380, ev: big, event: big, strikes: 1, wantTil: 0x400},
		{name: "second, by the other store", store: a, until: 0x400, ev: big, event: big, strikes: 2, wantTil: 0x400},
		{name: "a clear of another row", store: b, ev: other, clear: true, event: big, strikes: 2, wantTil: 0x400},
		{name: "third", store: b, until: 0x500, ev: big, event: big, strikes: 3, wantTil: 0x500},
		{name: "another row's strike replaces it", store: a, until: 0x500, ev: other, event: other, strikes: 1, wantTil: 0x500},
		{name: "a clear of its row", store: b, ev: other, clear: true, wantTil: 0x500},
		{name: "a strike anew", store: a, until: 0x500, ev: big, event: big, strikes: 1, wantTil: 0x500},
	}
	var first time.Time
	for _, st := range steps {
		if st.clear {
			if _, err := st.store.ClearRefusal(ctx, st.ev); err != nil {
				t.Fatalf("%s: %v", st.name, err)
			}
		} else if _, ok, err := st.store.Strike(ctx, st.until, st.ev, "406 "+st.name, false); !ok || err != nil {
			t.Fatalf("%s: Strike = %v, %v", st.name, ok, err)
		}
		if err := a.Save(ctx, Position{LSN: a.Saved() + 1, SystemID: "42", Timeline: 1}, true); err != nil {
			t.Fatal(err)
		}
		r, ok, err := NewStore(c, "cdc_router", "slot_a", 0).LoadRefusal(ctx)
		if err != nil || !ok {
			t.Fatalf("%s: LoadRefusal = %v, %v", st.name, ok, err)
		}
		if r.Event != st.event || r.Strikes != st.strikes || r.Until != st.wantTil {
			t.Fatalf("%s: record %+v, want event %+v with %d strikes until %v", st.name, r, st.event, st.strikes, st.wantTil)
		}
		switch {
		case st.strikes == 1:
			first = r.First
		case st.strikes > 1 && !r.First.Equal(first):
			t.Fatalf("%s: the first strike's time moved from %v to %v", st.name, first, r.First)
		}
		if st.strikes > 0 && !st.clear && (r.Reason != "406 "+st.name || r.Last.Before(r.First)) {
			t.Fatalf("%s: reason %q, last %v before first %v", st.name, r.Reason, r.Last, r.First)
		}
	}
	r, ok, err := NewStore(c, "cdc_router", "slot_b", 0).LoadRefusal(ctx)
	if err != nil || !ok || r.Until != 0 || !r.Event.Zero() {
		t.Fatalf("slot_b's record = %+v, %v, %v: another slot's strikes leaked", r, ok, err)
	}
	if _, ok, err := NewStore(c, "cdc_router", "slot_c", 0).LoadRefusal(ctx); ok || err != nil {
		t.Fatalf("LoadRefusal without a stored position = %v, %v", ok, err)
	}
}
