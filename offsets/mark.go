package offsets

import (
	"slices"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TxnKey names a transaction of the stream so that a replay of it can be recognised: its commit LSN (the
// Begin message's final LSN, the start of its commit record) and its xid. The tracker only compares keys;
// the caller pins them to one cluster, timeline and decoding configuration (see Position.Mark).
type TxnKey struct {
	CommitLSN cdc.LSN
	Xid       uint32
}

// MaxOpen bounds the items a Mark lists as not confirmed: a Mark that would list more stops at the first
// one beyond (its Seen is cut there), so that it costs at most this many entries in memory and in the
// stored record (about a byte each there). The router's in-flight window and held events (34,816 by
// default) stay well below it: their items are the only ones that can be unconfirmed between confirmed ones.
const MaxOpen = 1 << 16

// Mark is the progress inside the oldest transaction not acknowledged yet: which items of transaction Key,
// in stream order, are confirmed (or quarantined). The acknowledged LSN cannot say this: PostgreSQL resumes
// only at a transaction's start. A replay of Key may pass over the confirmed items (Tracker.Pass).
//
// Items 0..Done-1 are all confirmed (the gap-free prefix); of items Done..Seen-1 every one is confirmed but
// those listed in Open; items from Seen on are not. Open is ascending, within [Done, Seen), starts with Done
// when Seen > Done, and never ends with Seen-1 (Seen is one past the last confirmed item). The zero Mark
// says nothing is confirmed.
type Mark struct {
	Key  TxnKey
	Done int
	Seen int
	Open []int
}

// Confirmed is the number of items the mark counts as confirmed.
func (m Mark) Confirmed() int { return max(m.Seen, m.Done) - len(m.Open) }

// Covers reports whether item i is confirmed according to the mark.
func (m Mark) Covers(i int) bool {
	if i < m.Done {
		return true
	}
	if i >= m.Seen {
		return false
	}
	_, open := slices.BinarySearch(m.Open, i)
	return !open
}

// Same reports whether m and o say the same thing.
func (m Mark) Same(o Mark) bool {
	return m.Key == o.Key && m.Done == o.Done && m.Seen == o.Seen && slices.Equal(m.Open, o.Open)
}

// valid reports whether m has the shape Mark documents (a stored record that does not is ignored).
func (m Mark) valid() bool {
	if m.Done < 0 || m.Seen < m.Done || (m.Seen > m.Done) != (len(m.Open) > 0) || len(m.Open) > MaxOpen {
		return false
	}
	for j, o := range m.Open {
		if o < m.Done || o >= m.Seen-1 || (j == 0 && o != m.Done) || (j > 0 && o <= m.Open[j-1]) {
			return false
		}
	}
	return true
}

// markOf builds the Mark of key from the items confirmed below seen: every item below seen is confirmed but
// those listed in open (ascending, all below seen). It trims the unconfirmed items at the end and applies
// MaxOpen.
func markOf(key TxnKey, seen int, open []int) Mark {
	for len(open) > 0 && open[len(open)-1] == seen-1 {
		open, seen = open[:len(open)-1], seen-1
	}
	if len(open) > MaxOpen {
		open, seen = open[:MaxOpen], open[MaxOpen]
		for len(open) > 0 && open[len(open)-1] == seen-1 {
			open, seen = open[:len(open)-1], seen-1
		}
	}
	m := Mark{Key: key, Done: seen, Seen: seen}
	if len(open) > 0 {
		m.Done, m.Open = open[0], open
	}
	return m
}

// ConfirmItem marks item i of transaction x (as Add returned it) as confirmed. A repeated confirm, an item
// never handed out or passed over, and an x that is no longer tracked are ignored.
func (t *Tracker) ConfirmItem(x Txn, i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(x)
	if s == nil || s.outstanding == 0 || !s.confirm(i) {
		return
	}
	s.outstanding--
	t.rev++
	t.advance()
}

// confirm turns item i, when it is listed open, into a tombstone, and reports whether it was.
func (s *txnState) confirm(i int) bool {
	k := s.head
	if k >= len(s.open) {
		return false
	}
	if s.open[k] != i { // out of stream order: look it up
		j, found := slices.BinarySearchFunc(s.open[k:], i, func(e, target int) int { return cmpItem(unTomb(e), target) })
		if !found || s.open[k+j] < 0 {
			return false
		}
		k += j
	}
	s.open[k] = ^i
	s.dead++
	for s.head < len(s.open) && s.open[s.head] < 0 {
		s.head++
		s.dead--
	}
	switch live := len(s.open) - s.head - s.dead; {
	case s.head == len(s.open):
		s.open, s.head, s.dead = s.open[:0], 0, 0
	case s.dead > 64 && s.dead > live, s.head > 1024 && s.head > len(s.open)/2:
		n := 0
		for _, e := range s.open[s.head:] {
			if e >= 0 {
				s.open[n] = e
				n++
			}
		}
		s.open, s.head, s.dead = s.open[:n], 0, 0
	}
	return true
}

func unTomb(e int) int {
	if e < 0 {
		return ^e
	}
	return e
}

func cmpItem(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Mark reports the progress inside the oldest transaction in flight, when it has a key and at least one
// of its items is confirmed; ok is false otherwise (nothing in flight, or nothing of it done). Its cost
// grows with the items in flight (it lists the unconfirmed ones); see RecentMark.
func (t *Tracker) Mark() (m Mark, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mark()
}

// RecentMark is Mark as it was at most maxAge ago: when the oldest transaction has many items in flight,
// the Mark is listed again only once maxAge passed since the last listing, so that a caller may ask for it
// at every message. An older Mark is still true: what was confirmed stays confirmed.
func (t *Tracker) RecentMark(maxAge time.Duration) (m Mark, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := &t.recent
	if r.rev == t.rev && !r.at.IsZero() {
		return r.mark, r.ok
	}
	now := time.Now()
	if len(t.txns) > 0 && len(t.txns[0].open)-t.txns[0].head > 256 && now.Sub(r.at) < maxAge {
		return r.mark, r.ok
	}
	r.mark, r.ok = t.mark()
	r.rev, r.at = t.rev, now
	return r.mark, r.ok
}

func (t *Tracker) mark() (Mark, bool) {
	if len(t.txns) == 0 || t.txns[0].key == (TxnKey{}) {
		return Mark{}, false
	}
	s := &t.txns[0]
	open := make([]int, 0, len(s.open)-s.head-s.dead)
	for _, e := range s.open[s.head:] {
		if e >= 0 {
			open = append(open, e)
		}
	}
	seen := s.added
	if r := s.resume; r != nil && r.mark.Seen > seen { // the items not replayed yet: as the earlier run left them
		for r.next < len(r.mark.Open) && r.mark.Open[r.next] < seen {
			r.next++
		}
		open = append(open, r.mark.Open[r.next:]...)
		seen = r.mark.Seen
	}
	m := markOf(s.key, seen, open)
	if m.Confirmed() == 0 {
		return Mark{}, false
	}
	return m, true
}
