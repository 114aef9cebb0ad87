package offsets

import (
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// model is the reference: it keeps every event explicitly and recomputes the watermark from scratch.
type model struct {
	acked cdc.LSN
	txns  []*modelTxn // all transactions ever begun, stream order
	open  bool
}

type modelTxn struct {
	end       cdc.LSN
	events    []bool // confirmed?
	committed bool
}

func (m *model) watermark() cdc.LSN {
	for _, x := range m.txns {
		if !x.committed {
			break
		}
		done := true
		for _, c := range x.events {
			done = done && c
		}
		if !done {
			break
		}
		m.acked = max(m.acked, x.end)
	}
	return m.acked
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

// FuzzTracker drives the tracker and the model with the same random operations: the watermark must match,
// never pass an unresolved transaction and never go back.
func FuzzTracker(f *testing.F) {
	f.Add([]byte{0, 1, 1, 2, 3, 3, 4})
	f.Add([]byte{0, 1, 1, 1, 2, 0, 1, 2, 3, 4, 3, 3, 4})
	f.Fuzz(func(t *testing.T, ops []byte) {
		tr, m := NewTracker(1), &model{acked: 1}
		var handles []Txn
		var open *modelTxn
		next := cdc.LSN(10)
		prev := tr.Watermark()
		for i, op := range ops {
			switch op % 5 {
			case 0: // begin
				if open == nil {
					handles = append(handles, tr.Begin())
					open = &modelTxn{}
					m.txns, m.open = append(m.txns, open), true
				}
			case 1: // add an event to the open transaction
				if open != nil {
					tr.Add(handles[len(handles)-1])
					open.events = append(open.events, false)
				}
			case 2: // commit
				if open != nil {
					next += cdc.LSN(op)%7 + 1
					tr.Commit(handles[len(handles)-1], next)
					open.end, open.committed, open, m.open = next, true, nil, false
				}
			case 3: // confirm the oldest unconfirmed event of a transaction chosen by the next byte
				if len(m.txns) > 0 {
					k := int(op/5) % len(m.txns)
					for j, c := range m.txns[k].events {
						if !c {
							m.txns[k].events[j] = true
							tr.Confirm(handles[k])
							break
						}
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
		}
	})
}
