package quarantine

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// storedEvent is a record written by Store from an event with the given payload and headers, read back
// with Records.Load.
func storedEvent(t *testing.T, s *Store, r *Records, id string, payload []byte, headers string) Record {
	t.Helper()
	ctx := context.Background()
	ev := cdc.Event{ID: id, AggregateType: "order", AggregateID: "a-" + id[:4], AggregateVersion: 1, EventType: "created",
		SchemaVersion: 1, Payload: payload, Headers: []byte(headers), OccurredAt: time.Date(2026, 11, 30, 12, 0, 0, 123000, time.UTC),
		CommitLSN: 0x1000, LSN: cdc.LSN(0x0F00 + int(id[0]))} // a position of its own per record
	if err := s.Write(ctx, FromEvent(ev, "public.outbox", "test reason")); err != nil {
		t.Fatal(err)
	}
	recs, err := r.List(ctx, 1, false)
	if err != nil || len(recs) != 1 || recs[0].EventID != id {
		t.Fatalf("List = %v, %v", recs, err)
	}
	rec, ok, err := r.Load(ctx, recs[0].ID)
	if err != nil || !ok {
		t.Fatalf("Load(%d) = %v, %v", recs[0].ID, ok, err)
	}
	return rec
}

// TestReplayEventAndHandling: an event's record is replayed from the stored values (the same event with
// its own headers, marked Replayed), or from the outbox row when given; a record with a cut value or
// values that still fail is refused with ErrNotReplayable; MarkHandled marks once; Purge deletes only
// handled records.
func TestReplayEventAndHandling(t *testing.T) {
	ctx := context.Background()
	conn := database(t, "", "")
	s, r := NewStore(conn, "cdc_router", "slot1"), NewRecords(conn, "cdc_router")
	cfg := decode.Config{Table: "public.outbox"}

	whole := storedEvent(t, s, r, "11111111-1111-4111-8111-111111111111", []byte(`{"a": 1}`), `{"trace": "t"}`)
	ev, source, err := ReplayEvent(cfg, whole, nil)
	if err != nil || source != FromStored {
		t.Fatalf("ReplayEvent from stored values = %v, %q", err, source)
	}
	if ev.ID != whole.EventID || string(ev.Payload) != `{"a": 1}` || ev.CommitLSN != 0x1000 || ev.Backfill ||
		string(ev.Headers) != `{"trace": "t"}` || ev.Replayed == nil || ev.Replayed.RecordID != whole.ID ||
		!ev.Replayed.QuarantinedAt.Equal(whole.QuarantinedAt) {
		t.Errorf("replayed event = %+v, headers %s", ev, ev.Headers)
	}

	big := append([]byte(`{"s": "`), append([]byte(strings.Repeat("x", cdc.MaxStoredValue)), `"}`...)...)
	cut := storedEvent(t, s, r, "22222222-2222-4222-8222-222222222222", big, ``)
	if _, _, err := ReplayEvent(cfg, cut, nil); !errors.Is(err, ErrNotReplayable) || !strings.Contains(err.Error(), "payload") {
		t.Errorf("ReplayEvent of a cut value = %v, want ErrNotReplayable naming payload", err)
	}
	row := map[string]*string{}
	for k, v := range map[string]string{"id": cut.EventID, "aggregate_type": "order", "aggregate_id": "a", "aggregate_version": "1",
		"event_type": "created", "schema_version": "1", "payload": string(big), "occurred_at": "2026-11-30 12:00:00+00"} {
		row[k] = &v
	}
	if ev, source, err := ReplayEvent(cfg, cut, row); err != nil || source != FromOutbox || len(ev.Payload) != len(big) {
		t.Errorf("ReplayEvent from the outbox row = %v, %q", err, source)
	}
	bad := "not json"
	row["payload"] = &bad
	if _, _, err := ReplayEvent(cfg, cut, row); !errors.Is(err, ErrNotReplayable) || !strings.Contains(err.Error(), "outbox table still") {
		t.Errorf("ReplayEvent of an outbox row that still fails = %v", err)
	}
	cut.Values = nil
	if _, _, err := ReplayEvent(cfg, cut, nil); !errors.Is(err, ErrNotReplayable) {
		t.Errorf("ReplayEvent of a minimal record = %v", err)
	}

	for i, want := range []bool{true, false} {
		if changed, err := r.MarkHandled(ctx, whole.ID, HandledReplayed); err != nil || changed != want {
			t.Errorf("MarkHandled #%d = %v, %v; want %v", i+1, changed, err, want)
		}
	}
	if rec, _, _ := r.Load(ctx, whole.ID); !rec.Handled() || rec.HandledHow != HandledReplayed {
		t.Errorf("after MarkHandled: %+v", rec)
	}
	if open, _ := r.List(ctx, 0, true); len(open) != 1 || open[0].ID != cut.ID {
		t.Errorf("List open = %+v", open)
	}
	if n, err := r.Purge(ctx, time.Now().Add(time.Minute)); err != nil || n != 1 {
		t.Errorf("Purge = %d, %v; want the one handled record", n, err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
