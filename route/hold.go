package route

import (
	"sync"

	amqp "github.com/rabbitmq/amqp091-go"

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
// Held events wait aside (ADR 0009): they keep their event, not its message (rebuilt when let through),
// and take no slot of the lane's window, so a long run of one
// aggregate does not stop the others. Their number across the Router is bounded by room (Config.MaxHeld),
// their bytes by the Router's budget like every unresolved event; admit reports noRoom when room is out.
//
// Aggregates are told apart by the 64-bit hash that also picks their lane (aggregateHash). Two aggregates
// whose hashes collide are serialised as if they were one: slower, never out of order.
//
// Publish calls admit for each event; confirmLoop calls next for each confirmed one, and hands the
// publishing it returns, which takes over the confirmed one's window slot, to publishLoop; discard takes
// what is still held once the lane has stopped. Lock order: holds, then room.
type holds struct {
	perAggregate int
	room         *budget // held events across the Router, one unit each

	mu   sync.Mutex
	busy map[uint64]aggregate // presence: the aggregate has an event between admit and its confirm
	n    int                  // publishings held in this lane
}

// aggregate is the state of one busy aggregate: its events let through and not yet confirmed, and the
// queue of its held publishings, linked through publishing.next.
type aggregate struct {
	unconfirmed int
	head, tail  *publishing
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

// admit decides whether p is written now or held behind the events of its aggregate (or, with no room
// for one more held event, neither).
func (h *holds) admit(p *publishing) verdict {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.busy[p.agg]
	if a.head == nil && a.unconfirmed < h.perAggregate {
		a.unconfirmed++
		h.busy[p.agg] = a
		p.ev = cdc.Event{}
		return letThrough
	}
	if !h.room.tryAcquire(1) {
		return noRoom
	}
	// Held: keep the event, not its message (an amqp091 header table is most of a held event's memory);
	// the lane builds it again when it is let through. Under the lock, so that next sees it so.
	p.msg, p.rebuild = amqp.Publishing{}, true
	if p.ev.Mapped != nil && p.ev.Mapped.Columns != nil {
		m := *p.ev.Mapped
		m.Columns = nil // the row as sent, for the caller's quarantine records; not part of the message
		p.ev.Mapped = &m
	}
	if a.tail == nil {
		a.head = p
	} else {
		a.tail.next = p
	}
	a.tail = p
	h.busy[p.agg] = a
	h.n++
	return holdBack
}

// next is called once p is confirmed. It returns the next held publishing of p's aggregate, which is let
// through and must be written next (in p's window slot), or nil when none is held; the aggregate is free
// once none of its events is unconfirmed.
func (h *holds) next(p *publishing) *publishing {
	h.mu.Lock()
	defer h.mu.Unlock()
	a := h.busy[p.agg]
	n := a.head
	if n == nil {
		if a.unconfirmed--; a.unconfirmed <= 0 {
			delete(h.busy, p.agg)
		} else {
			h.busy[p.agg] = a
		}
		return nil
	}
	a.head, n.next = n.next, nil
	if a.head == nil {
		a.tail = nil
	}
	h.busy[p.agg] = a // unconfirmed stays: p's place goes to n
	h.n--
	h.room.release(1)
	return n
}

// discard calls release for every held publishing and forgets every aggregate; the lane has stopped.
func (h *holds) discard(release func(*publishing)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for agg, a := range h.busy {
		for p := a.head; p != nil; {
			n := p.next
			p.next = nil
			release(p)
			p = n
		}
		delete(h.busy, agg)
	}
	h.room.release(h.n)
	h.n = 0
}

// held returns the number of publishings held now.
func (h *holds) held() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}
