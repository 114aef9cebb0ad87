package offsets

import (
	"slices"
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// model is the reference: it keeps every event explicitly and recomputes the watermark and the mark from
// scratch.
type model struct {
	acked cdc.LSN
	txns  []*modelTxn // all transactions ever begun, stream order
	open  bool
}

type modelTxn struct {
	key       TxnKey
	end       cdc.LSN
	events    []bool // the items reached, in stream order: confirmed (or passed over)?
	committed bool
	resumed   Mark                // the mark of an earlier run the transaction began with
	again     map[string]struct{} // groups with an item the replay handed out although the mark was not past it
}

func (x *modelTxn) done() bool {
	for _, c := range x.events {
		if !c {
			return false
		}
	}
	return x.committed
}

// confirmed says whether item i counts as confirmed: as reached, or, not reached yet, as the resumed mark says.
func (x *modelTxn) confirmed(i int) bool {
	if i < len(x.events) {
		return x.events[i]
	}
	return x.resumed.Covers(i)
}

// pass is Tracker.Pass's rule, item by item: the next item is passed over when the resumed mark covers it
// and no earlier item of its group was handed out although the mark was not past it.
func (x *modelTxn) pass(group string) bool {
	i := len(x.events)
	if !x.resumed.Covers(i) {
		if group != "" && i < x.resumed.Seen {
			x.again[group] = struct{}{}
		}
		return false
	}
	_, again := x.again[group]
	return !(again && group != "")
}

func (m *model) watermark() cdc.LSN {
	for _, x := range m.txns {
		if !x.done() {
			break
		}
		m.acked = max(m.acked, x.end)
	}
	return m.acked
}

// mark is what is confirmed of the oldest transaction not done, when it has a key and anything confirmed:
// every item below one past the last confirmed, those not confirmed listed.
func (m *model) mark() (Mark, bool) {
	for _, x := range m.txns {
		if x.done() {
			continue
		}
		if x.key == (TxnKey{}) {
			return Mark{}, false
		}
		seen, last := max(len(x.events), x.resumed.Seen), -1
		for i := 0; i < seen; i++ {
			if x.confirmed(i) {
				last = i
			}
		}
		var open []int
		for i := 0; i < last; i++ {
			if !x.confirmed(i) {
				open = append(open, i)
			}
		}
		if last < 0 {
			return Mark{}, false
		}
		mk := Mark{Key: x.key, Done: last + 1, Seen: last + 1}
		if len(open) > 0 {
			mk.Done, mk.Open = open[0], open
		}
		return mk, true
	}
	return Mark{}, false
}

// popped is how many transactions the tracker no longer holds: the leading ones that are done.
func (m *model) popped() int {
	n := 0
	for n < len(m.txns) && m.txns[n].done() {
		n++
	}
	return n
}

// unconfirmed is the items handed out and not confirmed of the transactions not acknowledged yet.
func (m *model) unconfirmed() int {
	n, popped := 0, true
	for _, x := range m.txns {
		if popped && x.done() {
			continue
		}
		popped = false
		for _, c := range x.events {
			if !c {
				n++
			}
		}
	}
	return n
}

func (m *model) idle() bool {
	if m.open {
		return false
	}
	for _, x := range m.txns {
		for _, c := range x.events {
			if !c {
				return false
			}
		}
	}
	return true
}

// FuzzTracker drives the tracker and the model with the same random operations (transactions begun with
// and without a key and with a resumed mark, items of three groups passed over or handed out, events
// confirmed in any order, repeated confirms, confirms by count of transactions without a key): the watermark must match, never pass an unresolved transaction
// and never go back; Pass must pass over exactly the items the resumed mark covers, but none of a group after
// one of its items it does not cover; the mark must be the model's set of confirmed items of the oldest
// unresolved transaction, never more than was confirmed; and the tracker lists exactly the items handed out
// and not confirmed, no more (its memory is bounded by what is in flight).
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 3, 3, 4})
	f.Add([]byte{0, 1, 1, 1, 2, 0, 1, 2, 3, 4, 3, 3, 4})
	f.Add([]byte{5, 1, 1, 1, 8, 13, 3, 3, 2, 4})
	f.Add([]byte{10, 1, 1, 6, 11, 16, 2, 5, 1, 3, 8, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tr, m := NewTracker(1), &model{acked: 1}
		var handles []Txn
		var open *modelTxn
		next := cdc.LSN(10)
		prev := tr.Watermark()
		for i, op := range ops {
			switch op % 5 {
			case 0: // begin; op/5 odd: with a key and, when op/10%16 has bits, a resumed mark of 4 items (bit j: item j confirmed)
				if open == nil {
					open = &modelTxn{again: map[string]struct{}{}}
					if (op/5)%2 == 1 {
						open.key = TxnKey{CommitLSN: next + 1, Xid: uint32(len(m.txns))}
						var left []int
						for j := range 4 {
							if (op/10)%16&(1<<j) == 0 {
								left = append(left, j)
							}
						}
						if open.resumed = markOf(open.key, 4, left); open.resumed.Confirmed() == 0 {
							open.resumed = Mark{}
						}
					}
					handles = append(handles, tr.BeginAt(open.key, open.resumed))
					m.txns, m.open = append(m.txns, open), true
				}
			case 1: // the next item of the open transaction, of group op/5%3 ("", a or b): passed over or handed out
				if open != nil {
					group := []string{"", "a", "b"}[(op/5)%3]
					want := open.pass(group)
					if got := tr.Pass(handles[len(handles)-1], group); got != want {
						t.Fatalf("op %d: Pass(%q) of item %d = %v, model %v", i, group, len(open.events), got, want)
					}
					if want {
						open.events = append(open.events, true)
						break
					}
					if got := tr.Add(handles[len(handles)-1]); got != len(open.events) {
						t.Fatalf("op %d: Add returned ordinal %d, want %d", i, got, len(open.events))
					}
					open.events = append(open.events, false)
				}
			case 2: // commit
				if open != nil {
					next += cdc.LSN(op)%7 + 1
					tr.Commit(handles[len(handles)-1], next)
					open.end, open.committed, open, m.open = next, true, nil, false
				}
			case 3: // confirm event op/5 of a transaction chosen by op/25 (repeats included); from 200 on, one
				// event of a transaction without a key by count (Confirm), as the initial snapshot's pages do
				if len(m.txns) > 0 {
					k := int(op/25) % len(m.txns)
					x := m.txns[k]
					if op >= 200 && x.key == (TxnKey{}) {
						if j := slices.Index(x.events, false); j >= 0 && !(k < m.popped()) {
							x.events[j] = true
							tr.Confirm(handles[k])
						}
					} else if n := len(x.events); n > 0 {
						j := int(op/5) % n
						x.events[j] = true
						tr.ConfirmItem(handles[k], j)
					}
				}
			case 4: // keepalive a little past the newest commit
				end := next + cdc.LSN(op%3)
				if m.idle() && end > m.watermark() {
					m.acked = end
				}
				tr.Keepalive(end)
			}
			got, want := tr.Watermark(), m.watermark()
			if got != want {
				t.Fatalf("op %d (%d): watermark %v, model %v", i, op%5, got, want)
			}
			if got < prev {
				t.Fatalf("op %d: watermark went back from %v to %v", i, prev, got)
			}
			prev = got
			gm, gok := tr.Mark()
			wm, wok := m.mark()
			if !gm.Same(wm) || gok != wok {
				t.Fatalf("op %d (%d): mark %+v %v, model %+v %v", i, op%5, gm, gok, wm, wok)
			}
			live := 0
			for _, s := range tr.txns {
				live += len(s.open) - s.head - s.dead
			}
			if want := m.unconfirmed(); live != want {
				t.Fatalf("op %d (%d): the tracker lists %d items as unconfirmed, model %d", i, op%5, live, want)
			}
		}
	})
}
