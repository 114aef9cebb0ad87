package offsets

import "github.com/cdc-router/cdc-router/internal/cdc"

// TxnKey names a transaction of the stream so that a replay of it can be recognised: its commit LSN (the
// Begin message's final LSN, the start of its commit record) and its xid. The tracker only compares keys;
// the caller pins them to one cluster, timeline and decoding configuration (see Position.Mark).
type TxnKey struct {
	CommitLSN cdc.LSN
	Xid       uint32
}

// Mark is the progress inside the oldest transaction not acknowledged yet: the first Done items of
// transaction Key, in stream order, are all confirmed (or quarantined). The acknowledged LSN cannot say
// this: PostgreSQL resumes only at a transaction's start. A replay of Key may skip those Done items.
type Mark struct {
	Key  TxnKey
	Done int
}

// item is one item handed out: its transaction and its ordinal in that transaction's stream order.
type item struct {
	txn Txn
	i   int
}

// ConfirmItem marks item i of transaction x (as Add returned it) as confirmed. A repeated confirm, an item
// never handed out and an x that is no longer tracked are ignored. (Once ahead was full for x, a repeated
// confirm of an item beyond its prefix can no longer be told apart; the session confirms each item once.)
func (t *Tracker) ConfirmItem(x Txn, i int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.state(x)
	if s == nil || s.outstanding == 0 || i < s.prefix || i >= s.added {
		return
	}
	if i > s.prefix {
		if _, dup := t.ahead[item{x, i}]; dup {
			return
		}
		if s.lossy || len(t.ahead) >= t.aheadLimit {
			s.lossy = true // counted, not remembered: the prefix cannot pass item i any more
		} else {
			t.ahead[item{x, i}] = struct{}{}
			s.aheadN++
		}
		s.outstanding--
		t.advance()
		return
	}
	s.prefix++
	for s.aheadN > 0 {
		if _, ok := t.ahead[item{x, s.prefix}]; !ok {
			break
		}
		delete(t.ahead, item{x, s.prefix})
		s.aheadN--
		s.prefix++
	}
	s.outstanding--
	t.advance()
}

// Mark reports the progress inside the oldest transaction in flight, when it has a key and at least one
// of its first items is confirmed; ok is false otherwise (nothing in flight, or nothing of it done).
func (t *Tracker) Mark() (m Mark, ok bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.txns) == 0 || t.txns[0].key == (TxnKey{}) || t.txns[0].prefix == 0 {
		return Mark{}, false
	}
	return Mark{Key: t.txns[0].key, Done: t.txns[0].prefix}, true
}
