package offsets

import (
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// step is one call on the tracker in a table test.
type step struct {
	op   string // begin, add, confirm, commit, keepalive
	txn  int    // index of the transaction (order of begin), for add/confirm/commit
	lsn  cdc.LSN
	want cdc.LSN // watermark after the step
}

func TestTrackerWatermark(t *testing.T) {
	cases := []struct {
		name  string
		start cdc.LSN
		steps []step
	}{
		{"one event, confirmed after commit", 100, []step{
			{op: "begin", want: 100}, {op: "add", txn: 0, want: 100}, {op: "commit", txn: 0, lsn: 200, want: 100},
			{op: "confirm", txn: 0, want: 200},
		}},
		{"confirmed before commit waits for commit", 100, []step{
			{op: "begin", want: 100}, {op: "add", txn: 0, want: 100}, {op: "confirm", txn: 0, want: 100},
			{op: "commit", txn: 0, lsn: 200, want: 200},
		}},
		{"later transaction confirmed first does not pass the earlier one", 100, []step{
			{op: "begin"}, {op: "add", txn: 0}, {op: "commit", txn: 0, lsn: 200},
			{op: "begin"}, {op: "add", txn: 1}, {op: "commit", txn: 1, lsn: 300},
			{op: "confirm", txn: 1, want: 100}, {op: "confirm", txn: 0, want: 300},
		}},
		{"partly confirmed transaction holds the watermark", 100, []step{
			{op: "begin"}, {op: "add", txn: 0}, {op: "add", txn: 0}, {op: "commit", txn: 0, lsn: 200},
			{op: "confirm", txn: 0, want: 100}, {op: "confirm", txn: 0, want: 200},
		}},
		{"transaction without events completes in its turn", 100, []step{
			{op: "begin"}, {op: "add", txn: 0}, {op: "commit", txn: 0, lsn: 200},
			{op: "begin"}, {op: "commit", txn: 1, lsn: 300, want: 100},
			{op: "confirm", txn: 0, want: 300},
		}},
		{"empty transaction alone completes at once", 100, []step{
			{op: "begin"}, {op: "commit", txn: 0, lsn: 300, want: 300},
		}},
		{"keepalive adopted when idle", 100, []step{
			{op: "keepalive", lsn: 500, want: 500}, {op: "keepalive", lsn: 400, want: 500},
		}},
		{"keepalive ignored while events are in flight", 100, []step{
			{op: "begin"}, {op: "add", txn: 0}, {op: "commit", txn: 0, lsn: 200},
			{op: "keepalive", lsn: 500, want: 100}, {op: "confirm", txn: 0, want: 200},
			{op: "keepalive", lsn: 500, want: 500},
		}},
		{"keepalive ignored inside an open transaction", 100, []step{
			{op: "begin"}, {op: "keepalive", lsn: 500, want: 100}, {op: "commit", txn: 0, lsn: 600, want: 600},
		}},
		{"extra confirm is ignored", 100, []step{
			{op: "begin"}, {op: "add", txn: 0}, {op: "add", txn: 0}, {op: "confirm", txn: 0}, {op: "confirm", txn: 0},
			{op: "confirm", txn: 0}, {op: "commit", txn: 0, lsn: 200, want: 200},
		}},
		{"never goes back", 300, []step{
			{op: "begin"}, {op: "commit", txn: 0, lsn: 200, want: 300},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr := NewTracker(tc.start)
			var handles []Txn
			for i, s := range tc.steps {
				switch s.op {
				case "begin":
					handles = append(handles, tr.Begin())
				case "add":
					tr.Add(handles[s.txn])
				case "confirm":
					tr.Confirm(handles[s.txn])
				case "commit":
					tr.Commit(handles[s.txn], s.lsn)
				case "keepalive":
					tr.Keepalive(s.lsn)
				}
				if s.want != 0 && tr.Watermark() != s.want {
					t.Fatalf("step %d (%s): watermark %v, want %v", i, s.op, tr.Watermark(), s.want)
				}
			}
		})
	}
}

func TestTrackerMemoryIsPerTransaction(t *testing.T) {
	tr := NewTracker(1)
	x := tr.Begin()
	for i := 0; i < 100_000; i++ {
		tr.Add(x)
	}
	tr.Commit(x, 10)
	if n := tr.InFlight(); n != 1 {
		t.Fatalf("in flight = %d transactions, want 1", n)
	}
	for i := 0; i < 99_999; i++ {
		tr.Confirm(x)
	}
	if tr.Watermark() != 1 {
		t.Fatalf("watermark moved with one event unconfirmed")
	}
	tr.Confirm(x)
	if tr.Watermark() != 10 || tr.InFlight() != 0 {
		t.Fatalf("watermark %v in flight %d, want 0/A and 0", tr.Watermark(), tr.InFlight())
	}
	select {
	case <-tr.Advanced():
	default:
		t.Fatal("Advanced not signalled")
	}
}

func BenchmarkTrackerEvent(b *testing.B) {
	tr := NewTracker(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		x := tr.Begin()
		tr.Add(x)
		tr.Commit(x, cdc.LSN(i+2))
		tr.Confirm(x)
	}
}
