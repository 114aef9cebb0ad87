package offsets

import (
	"sync"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Txn is the handle of one transaction in the tracker, returned by Begin.
type Txn uint64

type txnState struct {
	end         cdc.LSN // TransactionEndLSN, known at Commit
	outstanding int     // events handed out and not yet confirmed
	committed   bool
	key         TxnKey // the transaction's name across replays; zero: none (no Mark)
	added       int    // items handed out or passed over (Pass), in stream order
	// open lists the items handed out (Add) and not confirmed yet, ascending; a confirmed one becomes the
	// tombstone ^i until it is dropped. Only items handed out and unconfirmed are ever listed, so its length
	// is bounded by what the publisher holds in flight, whatever the size or shape of the transaction.
	open   []int
	head   int     // open[:head] are dropped; open[head], when there, is not a tombstone
	dead   int     // tombstones in open[head:]
	resume *resume // the Mark of an earlier run that this transaction's replay passes over; nil: none
}

// resume is the replay of a transaction past the Mark of an earlier run (BeginAt).
type resume struct {
	mark Mark
	next int // index in mark.Open of the first item at or after the transaction's added
	// again holds the groups (aggregates) with an item published again in this replay: their later items
	// are published again too, never passed over, so that an aggregate's later version never goes out
	// before an earlier one that was not confirmed. It holds at most one entry per item of mark.Open.
	again map[string]struct{}
}

// Tracker computes the acknowledgement watermark. Begin, Add, Pass, Commit and Keepalive are called by the
// one goroutine that reads the stream; Confirm and ConfirmItem may be called from any goroutine.
type Tracker struct {
	mu       sync.Mutex
	acked    cdc.LSN
	head     Txn        // handle of txns[0]
	txns     []txnState // transactions in stream order, oldest first
	open     bool
	advanced chan struct{}
	spare    [][]int // emptied open lists of acknowledged transactions, reused by the next ones

	rev    uint64 // counts the changes that can change the Mark
	recent struct {
		rev  uint64
		at   time.Time
		mark Mark
		ok   bool
	}
}

// NewTracker starts a tracker whose watermark is start (the position the stream starts from).
func NewTracker(start cdc.LSN) *Tracker {
	return &Tracker{acked: start, head: 1, advanced: make(chan struct{}, 1)}
}

// Begin opens the next transaction in stream order, without a name: no Mark is ever reported for it.
func (t *Tracker) Begin() Txn { return t.BeginAt(TxnKey{}, Mark{}) }

// BeginAt opens the next transaction in stream order, named key. resumed is the Mark of an earlier run for
// the same key (or the zero Mark): the items it covers were confirmed before, and Pass passes over them.
func (t *Tracker) BeginAt(key TxnKey, resumed Mark) Txn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open = true
	s := txnState{key: key}
	if n := len(t.spare); n > 0 {
		s.open, t.spare = t.spare[n-1], t.spare[:n-1]
	}
	if key != (TxnKey{}) && resumed.Key == key && resumed.Confirmed() > 0 {
		resumed.Seen = max(resumed.Seen, resumed.Done) // a mark of the prefix alone
		s.resume = &resume{mark: resumed, again: map[string]struct{}{}}
	}
	t.txns = append(t.txns, s)
	t.rev++
	return t.head + Txn(len(t.txns)-1)
}

// Add counts the next item of transaction x as outstanding and returns its ordinal in x's stream order
// (for ConfirmItem). Call it before handing the item out.
func (t *Tracker) Add(x Txn) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(x)
	if s == nil {
		return -1
	}
	s.outstanding++
	s.added++
	s.open = append(s.open, s.added-1)
	t.rev++
	return s.added - 1
}

// Pass reports whether the next item of transaction x is one its resumed Mark covers and may be passed
// over (not published again); it then counts it as confirmed, and the caller hands nothing out. Otherwise
// nothing changed, and the caller hands the item out with Add. group names the item's aggregate ("" for
// none): once an item of a group is not covered, the later items of that group in x are not passed over
// either, so that what is published again keeps each aggregate's order.
func (t *Tracker) Pass(x Txn, group string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(x)
	if s == nil || s.resume == nil {
		return false
	}
	r, i := s.resume, s.added
	for r.next < len(r.mark.Open) && r.mark.Open[r.next] < i {
		r.next++
	}
	if !r.mark.Covers(i) {
		if group != "" && i < r.mark.Seen {
			r.again[group] = struct{}{}
		}
		return false
	}
	if _, ok := r.again[group]; ok && group != "" {
		return false
	}
	s.added++
	t.rev++
	return true
}

// Confirm marks one event of transaction x as confirmed without saying which: the transaction's Mark then
// counts none of its items handed out so far as confirmed by it. An x that is no longer tracked is ignored.
// For a transaction without a key (no Mark), one listed item is dropped, so that the list stays bounded by
// what is in flight (the initial snapshot's pages, a burst's message outside a transaction).
func (t *Tracker) Confirm(x Txn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.state(x); s != nil && s.outstanding > 0 {
		if s.key == (TxnKey{}) && s.head < len(s.open) {
			s.confirm(s.open[s.head])
		}
		s.outstanding--
		t.rev++
		t.advance()
	}
}

// Commit closes transaction x, whose commit record ends at end. Its end becomes the watermark once every
// event of it and of the transactions before it is confirmed.
func (t *Tracker) Commit(x Txn, end cdc.LSN) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open = false
	if s := t.state(x); s != nil {
		s.end, s.committed = end, true
		if ackOnReceipt && end > t.acked {
			t.acked = end // deliberately wrong, built only with -tags unsafeack
			t.signal()
		}
		t.advance()
	}
}

// Keepalive offers the server's WAL end from a keepalive. It is adopted only when nothing is in flight and
// no transaction is open: then every transaction ending at or before it has been received and confirmed.
// It reports whether the watermark moved.
func (t *Tracker) Keepalive(walEnd cdc.LSN) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.open || len(t.txns) > 0 || walEnd <= t.acked {
		return false
	}
	t.acked = walEnd
	t.signal()
	return true
}

// Watermark is the position that may be acknowledged to PostgreSQL and stored.
func (t *Tracker) Watermark() cdc.LSN {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.acked
}

// InFlight reports the transactions received and not yet fully confirmed, including an open one.
func (t *Tracker) InFlight() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.txns)
}

// Advanced is signalled (coalesced) whenever the watermark moves.
func (t *Tracker) Advanced() <-chan struct{} { return t.advanced }

func (t *Tracker) state(x Txn) *txnState {
	if x < t.head || x >= t.head+Txn(len(t.txns)) {
		return nil
	}
	return &t.txns[x-t.head]
}

// advance pops the complete prefix of the FIFO and moves the watermark to the last popped end.
func (t *Tracker) advance() {
	n := 0
	for n < len(t.txns) && t.txns[n].committed && t.txns[n].outstanding == 0 {
		if t.txns[n].end > t.acked {
			t.acked = t.txns[n].end
		}
		if o := t.txns[n].open; cap(o) > 0 && cap(o) <= 1024 && len(t.spare) < 8 {
			t.spare = append(t.spare, o[:0])
		}
		t.txns[n] = txnState{}
		n++
	}
	if n == 0 {
		return
	}
	t.head += Txn(n)
	t.txns = t.txns[n:]
	if cap(t.txns) > 64 && len(t.txns) < cap(t.txns)/4 {
		t.txns = append([]txnState(nil), t.txns...)
	}
	t.rev++
	t.signal()
}

func (t *Tracker) signal() {
	select {
	case t.advanced <- struct{}{}:
	default:
	}
}
