package route

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// heldEvent is an event of aggregate agg, the n-th handed to the lane, as Publish hands it to admit.
func heldEvent(agg uint64, n int) *held {
	return &held{ev: cdc.Event{ID: fmt.Sprintf("%d-%d", agg, n)}, agg: agg, size: 10}
}

// id is the event id of e, "" for nil.
func id(e *held) string {
	if e == nil {
		return ""
	}
	return e.ev.ID
}

// TestHolds: the second and third event of an aggregate are held until their predecessor is confirmed,
// in order; another aggregate is let through meanwhile; a confirmed last event frees its aggregate.
func TestHolds(t *testing.T) {
	h := newHolds(1, newBudget(DefaultMaxHeld))
	a1, a2, a3, b1 := heldEvent(1, 1), heldEvent(1, 2), heldEvent(1, 3), heldEvent(2, 1)
	for _, step := range []struct {
		e    *held
		want bool
	}{{a1, true}, {a2, false}, {b1, true}, {a3, false}} {
		if got := h.admit(step.e) == letThrough; got != step.want {
			t.Fatalf("admit(%s) = %v, want %v", id(step.e), got, step.want)
		}
	}
	if n := h.held(); n != 2 {
		t.Fatalf("held = %d, want 2", n)
	}
	for _, step := range []struct{ confirmed, next *held }{{b1, nil}, {a1, a2}, {a2, a3}, {a3, nil}} {
		if got := h.next(step.confirmed.agg); id(got) != id(step.next) {
			t.Fatalf("after %s is confirmed, next = %q, want %q", id(step.confirmed), id(got), id(step.next))
		}
	}
	if len(h.busy) != 0 || h.held() != 0 {
		t.Fatalf("after every confirm: %d aggregates busy, %d held", len(h.busy), h.held())
	}
	if h.admit(heldEvent(1, 4)) != letThrough {
		t.Fatal("an aggregate whose events are all confirmed is still held")
	}
}

// TestHeldEventIsSmall: a held event costs the route heap its event and a few fields, not its message
// (MaxHeld of them must fit issue 9's memory bound: 100,000 events over 100 aggregates in one
// transaction hold 32,768 of them). The event's own strings and bodies belong to the caller; a mapped
// event's row (Mapped.Columns) is not kept.
func TestHeldEventIsSmall(t *testing.T) {
	const n = 20_000
	h := newHolds(1, newBudget(n+2))
	m := heldEvent(2, 0)
	m.ev.Mapped = &cdc.Mapped{RoutingKey: "k", Columns: make([]cdc.Column, 64)}
	h.admit(m)
	h.admit(m)
	if kept := h.busy[2].head.ev.Mapped; kept == nil || kept.Columns != nil || m.ev.Mapped.Columns == nil {
		t.Fatalf("a held mapped event keeps its row (%v), or the caller's event lost it", kept)
	}
	e := heldEvent(1, 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range n + 1 {
		h.admit(e)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(h)
	if per := (int64(after.HeapAlloc) - int64(before.HeapAlloc)) / n; per > 320 {
		t.Fatalf("%d bytes of heap per held event, want at most 320 (it was 640 with the message kept)", per)
	} else {
		t.Logf("%d bytes of heap per held event", per)
	}
}

// TestHoldsDiscard: discard releases every held publishing once and forgets the aggregates.
func TestHoldsDiscard(t *testing.T) {
	h := newHolds(1, newBudget(DefaultMaxHeld))
	for n := range 5 {
		for agg := range uint64(3) {
			h.admit(heldEvent(agg, n))
		}
	}
	released := map[string]int{}
	h.discard(func(e *held) { released[e.ev.ID]++ })
	if len(released) != 12 || h.held() != 0 || len(h.busy) != 0 {
		t.Fatalf("released %d of 12 held, %d still held, %d aggregates busy", len(released), h.held(), len(h.busy))
	}
	for id, n := range released {
		if n != 1 {
			t.Fatalf("%s released %d times", id, n)
		}
	}
}

// TestHoldsModel drives holds as a lane and Publish do, with confirms in random order (the broker may
// confirm the written events of different aggregates in any order, and a lane's confirms come late or
// early), for windows of 1 to 5 events per aggregate and a small bound on held events, against the
// reference: at most perAggregate unconfirmed events per aggregate, every aggregate's events written in
// the order they were handed over, every event written exactly once, never more held than the bound
// (an event refused for room is handed over again later, as Publish waits and admits it again), and
// nothing held at the end.
func TestHoldsModel(t *testing.T) {
	for seed := range uint64(400) {
		rng := rand.New(rand.NewPCG(seed, 7))
		aggs := 1 + rng.IntN(8)
		perAggregate := []int{1, 1, 2, 3, 5}[rng.IntN(5)]
		maxHeld := 1 + rng.IntN(20)
		room := newBudget(maxHeld)
		h := newHolds(perAggregate, room)
		var unconfirmed []*held       // written, in write order
		var waiting *held             // refused for room: Publish waits with it
		perAgg := map[uint64]int{}    // events handed over per aggregate
		written := map[uint64][]int{} // write order per aggregate
		inflight := map[uint64]int{}
		write := func(p *held) {
			if inflight[p.agg]++; inflight[p.agg] > perAggregate {
				t.Fatalf("seed %d: %s written while its aggregate has %d unconfirmed events (window %d)", seed, p.ev.ID, inflight[p.agg]-1, perAggregate)
			}
			var n int
			fmt.Sscanf(p.ev.ID[len(fmt.Sprint(p.agg))+1:], "%d", &n)
			written[p.agg] = append(written[p.agg], n)
			unconfirmed = append(unconfirmed, p)
		}
		admit := func(p *held) {
			switch h.admit(p) {
			case letThrough:
				write(p)
			case noRoom:
				waiting = p
			}
			if used, _ := room.usage(); used > maxHeld || h.held() != used {
				t.Fatalf("seed %d: %d held, room says %d, bound %d", seed, h.held(), used, maxHeld)
			}
		}
		total := 0
		for step := 0; step < 500 || len(unconfirmed) > 0 || waiting != nil; step++ {
			if waiting != nil && rng.IntN(2) == 0 {
				p := waiting
				waiting = nil
				admit(p)
				continue
			}
			if step < 500 && waiting == nil && (len(unconfirmed) == 0 || rng.IntN(3) > 0) {
				agg := uint64(rng.IntN(aggs))
				perAgg[agg]++
				total++
				admit(heldEvent(agg, perAgg[agg]))
				continue
			}
			if len(unconfirmed) == 0 {
				continue
			}
			// Confirms come in write order within a lane, so the oldest unconfirmed event of the aggregate.
			i := rng.IntN(len(unconfirmed))
			for j := range i {
				if unconfirmed[j].agg == unconfirmed[i].agg {
					i = j
					break
				}
			}
			p := unconfirmed[i]
			unconfirmed = append(unconfirmed[:i], unconfirmed[i+1:]...)
			inflight[p.agg]--
			if n := h.next(p.agg); n != nil {
				write(n)
			}
		}
		count := 0
		for agg, ns := range written {
			count += len(ns)
			for i, n := range ns {
				if n != i+1 {
					t.Fatalf("seed %d: aggregate %d written in the order %v", seed, agg, ns)
				}
			}
		}
		if used, _ := room.usage(); count != total || h.held() != 0 || len(h.busy) != 0 || used != 0 {
			t.Fatalf("seed %d: %d of %d written, %d still held, %d aggregates busy, room %d", seed, count, total, h.held(), len(h.busy), used)
		}
	}
}

// BenchmarkHolds is the bookkeeping the mechanism adds per event on the hot path (admit when written,
// next when confirmed), for events of 1,000 aggregates with up to 512 unconfirmed, as in a lane.
func BenchmarkHolds(b *testing.B) {
	h := newHolds(1, newBudget(DefaultMaxHeld))
	ps := make([]*held, 512)
	for i := range ps {
		ps[i] = heldEvent(uint64(i*7919%1000), i)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		p := ps[i%len(ps)]
		if h.admit(p) == letThrough {
			if n := h.next(p.agg); n != nil {
				b.Fatal("a held event behind a free aggregate")
			}
		}
	}
}

// TestAdmitOrWaitAdmitsOnce: one goroutine hands over the events of one aggregate as Publish does, with
// room for one held event, while another confirms each event let through as the lane's confirmLoop does
// (next, which frees room). Every event is let through exactly once, in order, and none is left waiting:
// room that comes back between admitOrWait's two tries must not admit the event a second time (held
// twice, or let through and then held behind itself, which stops its aggregate for good).
func TestAdmitOrWaitAdmitsOnce(t *testing.T) {
	const n, agg = 20000, 7
	h := newHolds(1, newBudget(1))
	through := make(chan int, n) // the events admitOrWait let through, each to be written now
	go func() {
		for i := range n {
			v, err := h.admitOrWait(heldEvent(agg, i), func(freed <-chan struct{}) error { <-freed; return nil })
			if err != nil {
				panic(err)
			}
			if v == letThrough {
				through <- i
			}
		}
	}()
	var got []int
	pending := -1 // the event let through and not confirmed yet
	for len(got) < n || pending >= 0 {
		if pending < 0 {
			select {
			case pending = <-through:
				got = append(got, pending)
			case <-time.After(5 * time.Second):
				t.Fatalf("after %d events let through, none more within 5 s: the aggregate waits on an event never written", len(got))
			}
		}
		pending = -1
		if e := h.next(agg); e != nil {
			fmt.Sscanf(e.ev.ID, "7-%d", &pending)
			got = append(got, pending)
		}
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("let through %d as the %d-th event (%d in all, want %d, each once, in order)", v, i, len(got), n)
		}
	}
	if h.held() != 0 || len(h.busy) != 0 {
		t.Fatalf("after the last confirm: %d held, %d aggregates busy", h.held(), len(h.busy))
	}
}
