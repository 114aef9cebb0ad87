package offsets

import (
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestTrackerMark: the mark is the contiguous confirmed prefix of the oldest transaction in flight, in
// stream order, whatever order the confirms come in; a resumed prefix counts as confirmed; it moves to the
// next transaction once the oldest is acknowledged, and is never reported for a transaction without a key.
func TestTrackerMark(t *testing.T) {
	a, b := TxnKey{CommitLSN: 500, Xid: 7}, TxnKey{CommitLSN: 900, Xid: 8}
	tr := NewTracker(100)
	x := tr.BeginAt(a, 0)
	for range 4 {
		tr.Add(x)
	}
	expect := func(step string, want Mark, wantOK bool) {
		t.Helper()
		if got, ok := tr.Mark(); got != want || ok != wantOK {
			t.Fatalf("%s: mark %+v %v, want %+v %v", step, got, ok, want, wantOK)
		}
	}
	expect("nothing confirmed", Mark{}, false)
	tr.ConfirmItem(x, 1)
	expect("second confirmed first", Mark{}, false)
	tr.ConfirmItem(x, 0)
	expect("first two confirmed", Mark{a, 2}, true)
	tr.ConfirmItem(x, 0)
	tr.ConfirmItem(x, 3)
	tr.ConfirmItem(x, 9) // never handed out
	expect("repeat, fourth, unknown", Mark{a, 2}, true)
	tr.Commit(x, 600)
	y := tr.BeginAt(b, 3) // a replay that resumes past three items
	tr.Add(y)
	expect("later transaction does not count", Mark{a, 2}, true)
	tr.ConfirmItem(x, 2)
	if tr.Watermark() != 600 {
		t.Fatalf("watermark %v, want 0/258", tr.Watermark())
	}
	expect("oldest acknowledged: the next one's resumed prefix", Mark{b, 3}, true)
	tr.Confirm(y) // anonymous: the mark cannot tell which, and stays
	expect("anonymous confirm", Mark{b, 3}, true)
	tr.Commit(y, 1000)
	expect("all acknowledged", Mark{}, false)
	z := tr.Begin()
	tr.ConfirmItem(z, tr.Add(z))
	expect("transaction without a key", Mark{}, false)
}

// BenchmarkTrackerItem is BenchmarkTrackerEvent with the confirm naming its item, as the stream confirms.
func BenchmarkTrackerItem(b *testing.B) {
	tr := NewTracker(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		x := tr.BeginAt(TxnKey{CommitLSN: 1, Xid: 1}, 0)
		tr.ConfirmItem(x, tr.Add(x))
		tr.Commit(x, cdc.LSN(i+2))
	}
}

// BenchmarkTrackerItemOutOfOrder confirms the items of one large transaction in pairs, the second first.
func BenchmarkTrackerItemOutOfOrder(b *testing.B) {
	tr := NewTracker(1)
	x := tr.BeginAt(TxnKey{CommitLSN: 1, Xid: 1}, 0)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		first, second := tr.Add(x), tr.Add(x)
		tr.ConfirmItem(x, second)
		tr.ConfirmItem(x, first)
	}
}

// TestTrackerMarkWithFullAhead: once the items remembered beyond a gap reach the limit, later ones are
// counted (the watermark still waits for every item and then moves) but not remembered, so the mark stops
// before the first of them, and the memory stays bounded.
func TestTrackerMarkWithFullAhead(t *testing.T) {
	tr := NewTracker(100)
	tr.aheadLimit = 2
	k := TxnKey{CommitLSN: 500, Xid: 7}
	x := tr.BeginAt(k, 0)
	for range 6 {
		tr.Add(x)
	}
	for i := 1; i < 6; i++ { // item 0 waits; 1 and 2 are remembered, 3..5 only counted
		tr.ConfirmItem(x, i)
	}
	if len(tr.ahead) != 2 {
		t.Fatalf("%d items remembered, want the limit of 2", len(tr.ahead))
	}
	tr.Commit(x, 600)
	if tr.Watermark() != 100 {
		t.Fatalf("watermark %v with item 0 unconfirmed", tr.Watermark())
	}
	y := tr.BeginAt(TxnKey{CommitLSN: 700, Xid: 8}, 0)
	tr.ConfirmItem(y, tr.Add(y)) // another transaction's confirm beyond the limit: its own is unaffected
	tr.ConfirmItem(x, 0)
	if tr.Watermark() != 600 {
		t.Fatalf("watermark %v once every item is confirmed, want 0/258", tr.Watermark())
	}
	if m, ok := tr.Mark(); !ok || m.Key.CommitLSN != 700 || m.Done != 1 {
		t.Fatalf("mark %+v %v, want the next transaction's 1", m, ok)
	}
	if len(tr.ahead) != 0 {
		t.Fatalf("%d items still remembered after their transaction was acknowledged", len(tr.ahead))
	}

	tr = NewTracker(100)
	tr.aheadLimit = 1
	x = tr.BeginAt(k, 0)
	for range 4 {
		tr.Add(x)
	}
	tr.ConfirmItem(x, 1) // remembered
	tr.ConfirmItem(x, 2) // counted only
	tr.ConfirmItem(x, 0)
	tr.ConfirmItem(x, 3)
	if m, _ := tr.Mark(); m.Done != 2 {
		t.Fatalf("mark %+v, want 2: it cannot pass item 2, confirmed while ahead was full", m)
	}
}
