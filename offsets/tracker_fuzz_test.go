package offsets

import (
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
	events    []bool // confirmed? (the ones a mark resumed past start confirmed)
	committed bool
}

func (x *modelTxn) done() bool {
	for _, c := range x.events {
		if !c {
			return false
		}
	}
	return x.committed
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

// mark is the confirmed prefix of the oldest transaction not done, when it has a key and a prefix.
func (m *model) mark() (Mark, bool) {
	for _, x := range m.txns {
		if x.done() {
			continue
		}
		n := 0
		for n < len(x.events) && x.events[n] {
			n++
		}
		if x.key == (TxnKey{}) || n == 0 {
			return Mark{}, false
		}
		return Mark{Key: x.key, Done: n}, true
	}
	return Mark{}, false
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
// and without a key and with a resumed prefix, events confirmed in any order, repeated confirms): the
// watermark must match, never pass an unresolved transaction and never go back, and the mark must be the
// model's confirmed prefix of the oldest unresolved transaction, never more than was confirmed.
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
			case 0: // begin; op/5 odd: with a key and op/10%4 events resumed past
				if open == nil {
					open = &modelTxn{}
					if (op/5)%2 == 1 {
						open.key = TxnKey{CommitLSN: next + 1, Xid: uint32(len(m.txns))}
						open.events = make([]bool, int(op/10)%4)
						for j := range open.events {
							open.events[j] = true
						}
					}
					handles = append(handles, tr.BeginAt(open.key, len(open.events)))
					m.txns, m.open = append(m.txns, open), true
				}
			case 1: // add an event to the open transaction
				if open != nil {
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
			case 3: // confirm event op/5 of a transaction chosen by op/25 (repeats included)
				if len(m.txns) > 0 {
					k := int(op/25) % len(m.txns)
					if n := len(m.txns[k].events); n > 0 {
						j := int(op/5) % n
						m.txns[k].events[j] = true
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
			if gm != wm || gok != wok {
				t.Fatalf("op %d (%d): mark %+v %v, model %+v %v", i, op%5, gm, gok, wm, wok)
			}
		}
	})
}
