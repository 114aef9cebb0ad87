package quarantine

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

func TestMappedShape(t *testing.T) {
	for values, want := range map[string]bool{
		`{"id": "1", "aggregatetype": "Order", "payload": "{}"}`:           true,
		`{"id": "1", "aggregate_type": "order", "aggregate_version": "1"}`: false,
		`{"id": "1", "aggregate_type": "order"}`:                           false, // a native row that drifted
		`not json`:                                                         false,
	} {
		if got := MappedShape(Record{Values: []byte(values)}); got != want {
			t.Errorf("MappedShape(%s) = %v, want %v", values, got, want)
		}
	}
	if MappedShape(Record{}) {
		t.Errorf("a record without stored values is taken as mapped")
	}
}

// TestReplayMapped: from the outbox row or the stored values (a missing column is NULL), mapped by the
// table's mapping, with the replay headers (the quarantine time among them), the record's commit position
// and its commit time as the timestamp (the quarantine time only for a record without one); a row that
// still fails, a value cut when stored and a dropped tombstone are refused.
func TestReplayMapped(t *testing.T) {
	m, err := mapping.ParseMapping("route.tombstone.on.empty.payload=true\namqp.tombstone=drop\n")
	if err != nil {
		t.Fatal(err)
	}
	cols := []decode.Column{{Name: "id", TypeOID: 20}, {Name: "aggregatetype", TypeOID: 25}, {Name: "aggregateid", TypeOID: 25},
		{Name: "payload", TypeOID: 3802}}
	mapper, err := decode.NewRowMapper(decode.Config{Table: "public.poller", Mapping: m}, "public.poller", cols)
	if err != nil {
		t.Fatal(err)
	}
	s := func(v string) *string { return &v }
	committed := time.Unix(1600000000, 0).UTC()
	rec := Record{ID: 7, LSN: 0x20, CommitLSN: 0x30, Table: "public.poller", EventID: "5", QuarantinedAt: time.Unix(1700000000, 0),
		CommitTime: committed}
	ev, source, err := ReplayMapped(mapper, rec, []*string{s("5"), s("Order"), s("o-1"), s(`{"a": 1}`)})
	if err != nil || source != FromOutbox || ev.ID != "5" || string(ev.Payload) != `{"a": 1}` || ev.CommitLSN != 0x30 ||
		ev.Mapped.RoutingKey != "outbox.event.Order" {
		t.Fatalf("from the row: %+v %s %v", ev, source, err)
	}
	hs := ev.Mapped.Headers
	if r := ev.Replayed; r == nil || r.RecordID != 7 || r.QuarantinedAt.UnixMilli() != 1700000000000 {
		t.Errorf("replayed %+v, want record 7 quarantined at 1700000000000 ms", r)
	}
	if !ev.Mapped.Timestamp.Equal(committed) || !hasHeader(hs, mapping.HeaderTimestampInMs, committed.UnixMilli()) {
		t.Errorf("replayed timestamp %v, headers %v; want the commit time %v", ev.Mapped.Timestamp, hs, committed)
	}
	old := rec
	old.CommitTime = time.Time{}
	if ev, _, err := ReplayMapped(mapper, old, []*string{s("5"), s("Order"), s("o-1"), s(`{"a": 1}`)}); err != nil ||
		!ev.Mapped.Timestamp.Equal(old.QuarantinedAt) {
		t.Errorf("a record without a commit time: timestamp %v, %v; want the quarantine time", ev.Mapped.Timestamp, err)
	}
	rec.Values = []byte(`{"id": "5", "aggregatetype": "Order", "payload": "{}"}`)
	ev, source, err = ReplayMapped(mapper, rec, nil)
	if err != nil || source != FromStored || ev.AggregateID != "" || string(ev.Payload) != "{}" {
		t.Fatalf("from the stored values: %+v %s %v", ev, source, err)
	}
	for name, tt := range map[string]struct {
		rec  Record
		row  []*string
		want string
	}{
		"row still fails":   {rec, []*string{s("5"), nil, s("o-1"), s("{}")}, "its row in public.poller still cannot become an event (aggregatetype (route.by.field) is NULL"},
		"stored fails":      {Record{ID: 7, Table: "public.poller", Values: []byte(`{"id": "5", "payload": "{}"}`)}, nil, "its row is no longer in public.poller and its stored values still cannot become an event"},
		"stored value cut":  {Record{ID: 7, Values: []byte(`{"id": "5"}`), Notes: []byte(`{"payload": {"truncated": true}}`)}, nil, "is not the whole value"},
		"dropped tombstone": {rec, []*string{s("5"), s("Order"), s("o-1"), nil}, "amqp.tombstone=drop"},
	} {
		_, _, err := ReplayMapped(mapper, tt.rec, tt.row)
		if !errors.Is(err, ErrNotReplayable) || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want ErrNotReplayable with %q", name, err, tt.want)
		}
	}
}

func hasHeader(hs []cdc.Header, name string, value any) bool {
	for _, h := range hs {
		if h.Name == name && h.Value == value {
			return true
		}
	}
	return false
}
