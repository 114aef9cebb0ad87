package offsets

import (
	"sync"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Txn is the handle of one transaction in the tracker, returned by Begin.
type Txn uint64

type txnState struct {
	end         cdc.LSN // TransactionEndLSN, known at Commit
	outstanding int     // events handed out and not yet confirmed
	committed   bool
	key         TxnKey // the transaction's name across replays; zero: none (no Mark)
	added       int    // items handed out, counting the ones a Mark resumed past
	prefix      int    // items 0..prefix-1 are all confirmed (ConfirmItem)
	aheadN      int    // entries of Tracker.ahead for this transaction
	lossy       bool   // an item was confirmed beyond the prefix while ahead was full: the prefix stops there
}

// Tracker computes the acknowledgement watermark. Begin, Add, Commit and Keepalive are called by the one
// goroutine that reads the stream; Confirm may be called from any goroutine.
type Tracker struct {
	mu       sync.Mutex
	acked    cdc.LSN
	head     Txn        // handle of txns[0]
	txns     []txnState // transactions in stream order, oldest first
	open     bool
	advanced chan struct{}
	// ahead holds the items confirmed out of stream order beyond their transaction's prefix, at most
	// aheadLimit: a confirm beyond that is counted without it, and its transaction's Mark stops growing.
	ahead      map[item]struct{}
	aheadLimit int
}

// DefaultAheadLimit bounds the items a Tracker remembers as confirmed beyond a gap in their transaction's
// prefix (about 1 MiB): while an early event of a large transaction waits for its confirm, later ones of
// other aggregates go on being confirmed, and remembering all of them would cost memory per event.
const DefaultAheadLimit = 1 << 14

// NewTracker starts a tracker whose watermark is start (the position the stream starts from).
func NewTracker(start cdc.LSN) *Tracker {
	return &Tracker{acked: start, head: 1, advanced: make(chan struct{}, 1), ahead: map[item]struct{}{},
		aheadLimit: DefaultAheadLimit}
}

// Begin opens the next transaction in stream order, without a name: no Mark is ever reported for it.
func (t *Tracker) Begin() Txn { return t.BeginAt(TxnKey{}, 0) }

// BeginAt opens the next transaction in stream order, named key, whose first done items (a Mark of an
// earlier run for the same key) were confirmed before: they count as confirmed and are not handed out again.
func (t *Tracker) BeginAt(key TxnKey, done int) Txn {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.open = true
	done = max(done, 0)
	t.txns = append(t.txns, txnState{key: key, added: done, prefix: done})
	return t.head + Txn(len(t.txns)-1)
}

// Add counts one more event of transaction x as outstanding and returns its ordinal in x's stream order
// (for ConfirmItem). Call it before handing the event out.
func (t *Tracker) Add(x Txn) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(x)
	if s == nil {
		return -1
	}
	s.outstanding++
	s.added++
	return s.added - 1
}

// Confirm marks one event of transaction x as confirmed without saying which: the transaction's Mark then
// stops where it is. An x that is no longer tracked is ignored.
func (t *Tracker) Confirm(x Txn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if s := t.state(x); s != nil && s.outstanding > 0 {
		s.outstanding--
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
	n, stale := 0, false
	for n < len(t.txns) && t.txns[n].committed && t.txns[n].outstanding == 0 {
		if t.txns[n].end > t.acked {
			t.acked = t.txns[n].end
		}
		stale = stale || t.txns[n].aheadN > 0
		n++
	}
	if n == 0 {
		return
	}
	if stale { // a transaction done with entries beyond a gap in its prefix (a Confirm, or a full ahead)
		for it := range t.ahead {
			if it.txn < t.head+Txn(n) {
				delete(t.ahead, it)
			}
		}
	}
	t.head += Txn(n)
	t.txns = t.txns[n:]
	if cap(t.txns) > 64 && len(t.txns) < cap(t.txns)/4 {
		t.txns = append([]txnState(nil), t.txns...)
	}
	t.signal()
}

func (t *Tracker) signal() {
	select {
	case t.advanced <- struct{}{}:
	default:
	}
}
