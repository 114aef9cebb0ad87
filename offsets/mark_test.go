package offsets

import (
	"slices"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// expectMark fails the test unless tr's Mark is want (ok when want confirms anything).
func expectMark(t *testing.T, tr *Tracker, step string, want Mark) {
	t.Helper()
	got, ok := tr.Mark()
	if wantOK := want.Confirmed() > 0; !got.Same(want) || ok != wantOK {
		t.Fatalf("%s: mark %+v %v, want %+v %v", step, got, ok, want, wantOK)
	}
}

// TestTrackerMark: the mark is what is confirmed of the oldest transaction in flight, whatever order the
// confirms come in: its gap-free prefix (Done), one past its last confirmed item (Seen) and the items
// between that are not confirmed (Open); a resumed mark counts as confirmed until the replay reaches its
// items; the mark moves to the next transaction once the oldest is acknowledged, and is never reported for a
// transaction without a key.
func TestTrackerMark(t *testing.T) {
	a, b := TxnKey{CommitLSN: 500, Xid: 7}, TxnKey{CommitLSN: 900, Xid: 8}
	tr := NewTracker(100)
	x := tr.BeginAt(a, Mark{})
	for range 5 {
		tr.Add(x)
	}
	expectMark(t, tr, "nothing confirmed", Mark{})
	tr.ConfirmItem(x, 1)
	expectMark(t, tr, "second confirmed first", Mark{Key: a, Done: 0, Seen: 2, Open: []int{0}})
	tr.ConfirmItem(x, 3)
	expectMark(t, tr, "second and fourth", Mark{Key: a, Done: 0, Seen: 4, Open: []int{0, 2}})
	tr.ConfirmItem(x, 0)
	expectMark(t, tr, "first, second and fourth", Mark{Key: a, Done: 2, Seen: 4, Open: []int{2}})
	tr.ConfirmItem(x, 0)
	tr.ConfirmItem(x, 3)
	tr.ConfirmItem(x, 9) // never handed out
	expectMark(t, tr, "repeats, unknown", Mark{Key: a, Done: 2, Seen: 4, Open: []int{2}})
	tr.Commit(x, 600)
	// A replay resuming past items 0, 1 and 3 of five (item 2 was not confirmed).
	y := tr.BeginAt(b, Mark{Key: b, Done: 2, Seen: 4, Open: []int{2}})
	expectMark(t, tr, "later transaction does not count", Mark{Key: a, Done: 2, Seen: 4, Open: []int{2}})
	tr.ConfirmItem(x, 2)
	expectMark(t, tr, "item 4 never confirmed", Mark{Key: a, Done: 4, Seen: 4})
	tr.ConfirmItem(x, 4)
	if tr.Watermark() != 600 {
		t.Fatalf("watermark %v, want 0/258", tr.Watermark())
	}
	expectMark(t, tr, "oldest acknowledged: the next one's resumed mark", Mark{Key: b, Done: 2, Seen: 4, Open: []int{2}})
	if !tr.Pass(y, "") || !tr.Pass(y, "") || tr.Pass(y, "") {
		t.Fatal("the replay did not pass over items 0 and 1, or passed over item 2")
	}
	if i := tr.Add(y); i != 2 {
		t.Fatalf("item 2 handed out as %d", i)
	}
	expectMark(t, tr, "item 2 handed out again", Mark{Key: b, Done: 2, Seen: 4, Open: []int{2}})
	if !tr.Pass(y, "") {
		t.Fatal("the replay did not pass over item 3")
	}
	tr.ConfirmItem(y, 2)
	expectMark(t, tr, "item 2 confirmed", Mark{Key: b, Done: 4, Seen: 4})
	tr.Confirm(y) // anonymous: nothing outstanding, ignored
	tr.ConfirmItem(y, tr.Add(y))
	tr.Commit(y, 1000)
	expectMark(t, tr, "all acknowledged", Mark{})
	if tr.Watermark() != 1000 {
		t.Fatalf("watermark %v, want 0/3E8", tr.Watermark())
	}
	z := tr.Begin()
	tr.ConfirmItem(z, tr.Add(z))
	expectMark(t, tr, "transaction without a key", Mark{})
}

// TestTrackerPassKeepsAggregateOrder: a replay passes over exactly the items its mark covers, except the
// items of an aggregate after one of its items the mark does not cover: those are handed out again, in
// order, so that an aggregate's later version never goes out before an earlier one that was not confirmed.
// Items without a group (quarantined rows, messages) are passed over whenever the mark covers them.
func TestTrackerPassKeepsAggregateOrder(t *testing.T) {
	k := TxnKey{CommitLSN: 500, Xid: 7}
	// Items 0..7 of groups h c1 h c2 h c3 "" c4; items 2 (h) and 6 ("") were not confirmed, the rest were.
	groups := []string{"h", "c1", "h", "c2", "h", "c3", "", "c4", "h"}
	resumed := Mark{Key: k, Done: 2, Seen: 8, Open: []int{2, 6}}
	tr := NewTracker(100)
	x := tr.BeginAt(k, resumed)
	var passed []int
	for i, g := range groups {
		if tr.Pass(x, g) {
			passed = append(passed, i)
		} else if got := tr.Add(x); got != i {
			t.Fatalf("item %d handed out as %d", i, got)
		}
	}
	if want := []int{0, 1, 3, 5, 7}; !slices.Equal(passed, want) {
		t.Fatalf("passed over %v, want %v (item 4, of the aggregate of item 2, is handed out again)", passed, want)
	}
	expectMark(t, tr, "after the replay", Mark{Key: k, Done: 2, Seen: 8, Open: []int{2, 4, 6}})
	tr.Commit(x, 600)
	for _, i := range []int{4, 2, 8, 6} {
		tr.ConfirmItem(x, i)
	}
	if tr.Watermark() != 600 {
		t.Fatalf("watermark %v once every item handed out is confirmed, want 0/258", tr.Watermark())
	}
}

// TestTrackerMarkIsBoundedByItemsInFlight: behind one unconfirmed item, 200,000 items are confirmed: the
// mark lists the one item, and the tracker remembers no more than a few entries (before, a mark stopped
// growing once 16,384 items were confirmed beyond a gap); nor does a transaction without a key confirmed by
// count (Confirm). A mark with more than MaxOpen unconfirmed items
// between confirmed ones stops before the first beyond MaxOpen.
func TestTrackerMarkIsBoundedByItemsInFlight(t *testing.T) {
	k := TxnKey{CommitLSN: 500, Xid: 7}
	tr := NewTracker(100)
	x := tr.BeginAt(k, Mark{})
	tr.Add(x)
	for range 200000 {
		tr.ConfirmItem(x, tr.Add(x))
	}
	expectMark(t, tr, "one item unconfirmed", Mark{Key: k, Done: 0, Seen: 200001, Open: []int{0}})
	if s := &tr.txns[0]; cap(s.open) > 1024 {
		t.Fatalf("the tracker holds %d entries for one unconfirmed item", cap(s.open))
	}
	tr.ConfirmItem(x, 0)
	tr.Commit(x, 600)
	if tr.Watermark() != 600 {
		t.Fatalf("watermark %v, want 0/258", tr.Watermark())
	}

	// Without a key, a confirm that does not say which item (the initial snapshot's pages) drops one.
	tr = NewTracker(100)
	x = tr.Begin()
	for range 100000 {
		tr.Add(x)
		tr.Add(x)
		tr.Confirm(x)
		tr.Confirm(x)
	}
	if s := &tr.txns[0]; cap(s.open) > 1024 || len(s.open) != s.head+s.dead {
		t.Fatalf("a transaction without a key, every item confirmed, lists %d items (%d entries)",
			len(s.open)-s.head-s.dead, cap(s.open))
	}

	tr = NewTracker(100)
	x = tr.BeginAt(k, Mark{})
	for range MaxOpen + 10 { // every other item confirmed
		tr.Add(x)
		tr.ConfirmItem(x, tr.Add(x))
	}
	m, ok := tr.Mark()
	if !ok || len(m.Open) != MaxOpen || m.Seen != 2*MaxOpen || m.Confirmed() != MaxOpen || !m.valid() {
		t.Fatalf("mark of %d unconfirmed items lists %d, Seen %d, %d confirmed; want %d, %d, %d", MaxOpen+10,
			len(m.Open), m.Seen, m.Confirmed(), MaxOpen, 2*MaxOpen, MaxOpen)
	}
}

// TestRecentMarkIsFreshWhenCheap: with few items in flight RecentMark is Mark; with many it is listed again
// only once maxAge passed, and what it reports is still true (a subset of what is confirmed).
func TestRecentMarkIsFreshWhenCheap(t *testing.T) {
	k := TxnKey{CommitLSN: 500, Xid: 7}
	tr := NewTracker(100)
	x := tr.BeginAt(k, Mark{})
	tr.Add(x)
	tr.ConfirmItem(x, tr.Add(x))
	if m, _ := tr.RecentMark(time.Hour); m.Confirmed() != 1 {
		t.Fatalf("recent mark %+v, want one confirmed", m)
	}
	tr.ConfirmItem(x, tr.Add(x))
	if m, _ := tr.RecentMark(time.Hour); m.Confirmed() != 2 {
		t.Fatalf("recent mark %+v with few items in flight, want it fresh (2 confirmed)", m)
	}
	for range 1000 {
		tr.Add(x)
		tr.ConfirmItem(x, tr.Add(x))
	}
	m, _ := tr.RecentMark(0)
	tr.ConfirmItem(x, tr.Add(x))
	if stale, _ := tr.RecentMark(time.Hour); !stale.Same(m) {
		t.Fatalf("recent mark listed again within maxAge")
	}
	fresh, _ := tr.RecentMark(0)
	if fresh.Confirmed() != m.Confirmed()+1 {
		t.Fatalf("recent mark with maxAge 0 confirms %d, want %d", fresh.Confirmed(), m.Confirmed()+1)
	}
}

// BenchmarkTrackerItem is BenchmarkTrackerEvent with the confirm naming its item, as the stream confirms.
func BenchmarkTrackerItem(b *testing.B) {
	tr := NewTracker(1)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		x := tr.BeginAt(TxnKey{CommitLSN: 1, Xid: 1}, Mark{})
		tr.ConfirmItem(x, tr.Add(x))
		tr.Commit(x, cdc.LSN(i+2))
	}
}

// BenchmarkTrackerItemOutOfOrder confirms the items of one large transaction in pairs, the second first.
func BenchmarkTrackerItemOutOfOrder(b *testing.B) {
	tr := NewTracker(1)
	x := tr.BeginAt(TxnKey{CommitLSN: 1, Xid: 1}, Mark{})
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		first, second := tr.Add(x), tr.Add(x)
		tr.ConfirmItem(x, second)
		tr.ConfirmItem(x, first)
	}
}

// BenchmarkTrackerItemBehindHeld confirms items of one large transaction while 30,000 earlier ones stay
// unconfirmed, as behind a hot aggregate's held events.
func BenchmarkTrackerItemBehindHeld(b *testing.B) {
	tr := NewTracker(1)
	x := tr.BeginAt(TxnKey{CommitLSN: 1, Xid: 1}, Mark{})
	for range 30000 {
		tr.Add(x)
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		tr.ConfirmItem(x, tr.Add(x))
	}
}
