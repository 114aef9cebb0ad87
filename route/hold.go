package route

import "sync"

// holds keeps at most one event per aggregate unconfirmed in a lane. An aggregate is busy from the moment
// one of its events is let through to be written until that event is confirmed; an event of a busy
// aggregate is held, in the order it came, and let through when its predecessor is confirmed. So when the
// broker refuses an event (a nack, a return, a closed channel), no later event of its aggregate has been
// written, and the restart from the acknowledged position cannot put a later version before it.
//
// Aggregates are told apart by the 64-bit hash that also picks their lane (aggregateHash). Two aggregates
// whose hashes collide are serialised as if they were one: slower, never out of order.
//
// publishLoop calls admit for each queued publishing; confirmLoop calls next for each confirmed one, and
// hands the publishing it returns back to publishLoop; discard takes what is still held once the lane
// has stopped. A held publishing keeps its slot of the window and its bytes of the budget.
type holds struct {
	mu   sync.Mutex
	busy map[uint64]heldList // presence: the aggregate has an event between admit and its confirm
	n    int                 // publishings held, for tests
}

// heldList is the queue of the held publishings of one aggregate, linked through publishing.next.
type heldList struct{ head, tail *publishing }

func newHolds() *holds { return &holds{busy: make(map[uint64]heldList)} }

// admit reports whether p may be written now; if not, p is held behind the events of its aggregate.
func (h *holds) admit(p *publishing) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	q, busy := h.busy[p.agg]
	if !busy {
		h.busy[p.agg] = heldList{}
		return true
	}
	if q.tail == nil {
		q.head = p
	} else {
		q.tail.next = p
	}
	q.tail = p
	h.busy[p.agg] = q
	h.n++
	return false
}

// next is called once p is confirmed. It returns the next held publishing of p's aggregate, which the
// aggregate stays busy for and which must be written next, or nil when none is held, and the aggregate is
// then free.
func (h *holds) next(p *publishing) *publishing {
	h.mu.Lock()
	defer h.mu.Unlock()
	q := h.busy[p.agg]
	if q.head == nil {
		delete(h.busy, p.agg)
		return nil
	}
	n := q.head
	q.head, n.next = n.next, nil
	if q.head == nil {
		q.tail = nil
	}
	h.busy[p.agg] = q
	h.n--
	return n
}

// discard calls release for every held publishing and forgets every aggregate; the lane has stopped.
func (h *holds) discard(release func(*publishing)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for agg, q := range h.busy {
		for p := q.head; p != nil; {
			n := p.next
			p.next = nil
			release(p)
			p = n
		}
		delete(h.busy, agg)
	}
	h.n = 0
}

// held returns the number of publishings held now.
func (h *holds) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}
