package route

import (
	"sync"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// holds keeps at most perAggregate events per aggregate unconfirmed in a lane (one by default, ADR
// 0006). An aggregate is busy from the moment one of its events is let through to be written until every
// event of it let through is confirmed; an event of an aggregate that has perAggregate events
// unconfirmed, or events held already, is held, in the order it came, and let through when a predecessor
// is confirmed. So with perAggregate 1, when the broker refuses an event (a nack, a return, a closed
// channel), no later event of its aggregate has been written, and the restart from the acknowledged
// position cannot put a later version before it.
//
// Held events wait aside (ADR 0009) as a held, not a publishing: the event and what its publishing needs
// besides the message, which the lane builds when it is let through. They take no slot of the lane's
// window, so a long run of one aggregate does not stop the others. Their number across the Router is
// bounded by room (Config.MaxHeld), their bytes by the Router's budget like every unresolved event;
// admit reports noRoom when room is out.
//
// Aggregates are told apart by the 64-bit hash that also picks their lane (aggregateHash). Two aggregates
// whose hashes collide are serialised as if they were one: slower, never out of order.
//
// Publish calls admit for each event; confirmLoop calls next for each confirmed one, builds the
// publishing of the held event it returns, which takes over the confirmed one's window slot, and queues
// it behind the lane's queue; discard takes what is still held once the lane has stopped. Lock order:
// holds, then room.
type holds struct {
	perAggregate int
	room         *budget   // held events across the Router, one unit each
	refused      *refusals // aggregates refused and not confirmed since: one unconfirmed event each (refused.go)

	mu   sync.Mutex
	busy map[uint64]aggregate // presence: the aggregate has an event between admit and its confirm
	n    int                  // events held in this lane
}

// held is an event held behind its aggregate: only what writing it needs once it is let through (its
// message is built again from ev), so that MaxHeld of them cost a few MiB, not tens.
type held struct {
	ev       cdc.Event // without Mapped.Columns
	exchange string
	agg      uint64
	size     int // body and content header bytes, held in the Router's budget
	done     func()
	next     *held // the next held event of the same aggregate
}

// aggregate is the state of one busy aggregate: its events let through and not yet confirmed, and the
// queue of its held events, linked through held.next.
type aggregate struct {
	unconfirmed int
	head, tail  *held
}

// verdict is admit's answer.
type verdict int

const (
	letThrough verdict = iota // write it now
	holdBack                  // held behind the events of its aggregate
	noRoom                    // would be held, but room is out: nothing changed
)

func newHolds(perAggregate int, room *budget) *holds {
	return &holds{perAggregate: perAggregate, room: room, busy: make(map[uint64]aggregate)}
}

// narrowing makes h keep one unconfirmed event per aggregate of refused (nil: none) and returns h.
func (h *holds) narrowing(refused *refusals) *holds {
	h.refused = refused
	return h
}

// window is how many events of agg may be unconfirmed: perAggregate, or one while agg is remembered as
// refused.
func (h *holds) window(agg uint64) int {
	if h.perAggregate > 1 && h.refused.has(agg) {
		return 1
	}
	return h.perAggregate
}

// admit decides whether the event e describes is written now or held behind the events of its aggregate
// (or, with no room for one more held event, neither). On holdBack it keeps a copy of e; e itself is not
// retained.
func (h *holds) admit(e *held) verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.busy[e.agg]
	if a.head == nil && a.unconfirmed < h.window(e.agg) {
		a.unconfirmed++
		h.busy[e.agg] = a
		return letThrough
	}
	if !h.room.tryAcquire(1) {
		return noRoom
	}
	c := new(held)
	*c = *e
	c.next = nil
	if c.ev.Mapped != nil && c.ev.Mapped.Columns != nil {
		m := *c.ev.Mapped
		m.Columns = nil // the row as sent, for the caller's quarantine records; not part of the message
		c.ev.Mapped = &m
	}
	if a.tail == nil {
		a.head = c
	} else {
		a.tail.next = c
	}
	a.tail = c
	h.busy[e.agg] = a
	h.n++
	return holdBack
}

// admitOrWait admits e as admit does, and while there is no room to hold it, waits: wait gets the channel
// that the next release of room closes, and returns nil to try again or an error to give up, which
// admitOrWait returns with nothing admitted. Otherwise it returns the verdict admit kept (letThrough or
// holdBack), admitted exactly once: a verdict other than noRoom has changed the holds already, so it is
// never asked for twice. (Publish used to ask again when room came back between its two tries: the event
// was then held twice, published twice, or, let through, left its aggregate waiting forever on an event
// never written; TestAdmitOrWaitAdmitsOnce stalls so within seconds. Found reading this path for seed 8126.)
func (h *holds) admitOrWait(e *held, wait func(freed <-chan struct{}) error) (verdict, error) {
	for {
		if v := h.admit(e); v != noRoom {
			return v, nil
		}
		freed := h.room.freedCh()
		if v := h.admit(e); v != noRoom { // room came back before freed was taken
			return v, nil
		}
		if err := wait(freed); err != nil {
			return noRoom, err
		}
	}
}

// next is called once an event of aggregate agg is confirmed. It returns the next held event of agg,
// which is let through and must be written next (in the confirmed one's window slot), or nil when none
// is held; the aggregate is free once none of its events is unconfirmed.
func (h *holds) next(agg uint64) *held {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.busy[agg]
	n := a.head
	if n == nil {
		if a.unconfirmed--; a.unconfirmed <= 0 {
			delete(h.busy, agg)
		} else {
			h.busy[agg] = a
		}
		return nil
	}
	a.head, n.next = n.next, nil
	if a.head == nil {
		a.tail = nil
	}
	h.busy[agg] = a // unconfirmed stays: the confirmed one's place goes to n
	h.n--
	h.room.release(1)
	return n
}

// discard calls release for every held event and forgets every aggregate; the lane has stopped.
func (h *holds) discard(release func(*held)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for agg, a := range h.busy {
		for e := a.head; e != nil; {
			n := e.next
			e.next = nil
			release(e)
			e = n
		}
		delete(h.busy, agg)
	}
	h.room.release(h.n)
	h.n = 0
}

// held returns the number of events held now.
func (h *holds) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}
