package route

import "testing"

// TestRefusedAggregateGoesOneAtATime: with AggregateWindow 3, an aggregate remembered as refused has one
// unconfirmed event, not three, while another aggregate keeps its window; once an event of it is
// confirmed (the lane clears it before asking for the next held one) it has its window again for the
// events admitted from then on.
func TestRefusedAggregateGoesOneAtATime(t *testing.T) {
	var refused refusals
	h := newHolds(3, newBudget(DefaultMaxHeld)).narrowing(&refused)
	refused.add(1)
	a1, a2, b1, b2, b3 := heldEvent(1, 1), heldEvent(1, 2), heldEvent(2, 1), heldEvent(2, 2), heldEvent(2, 3)
	for _, step := range []struct {
		e    *held
		want bool
	}{{a1, true}, {a2, false}, {b1, true}, {b2, true}, {b3, true}} {
		if got := h.admit(step.e) == letThrough; got != step.want {
			t.Fatalf("admit(%s) = %v, want %v", id(step.e), got, step.want)
		}
	}
	refused.clear(1) // a1 is confirmed
	if got := h.next(1); id(got) != id(a2) {
		t.Fatalf("after a1 is confirmed, next = %q, want a2", id(got))
	}
	if refused.len() != 0 {
		t.Fatalf("%d aggregates remembered after the confirm", refused.len())
	}
	if h.admit(heldEvent(1, 3)) != letThrough || h.admit(heldEvent(1, 4)) != letThrough || h.admit(heldEvent(1, 5)) != holdBack {
		t.Fatal("the aggregate did not get its window of 3 back once an event of it was confirmed")
	}
}

// TestRefusalsAreBounded: past maxRefused aggregates a refusal is not remembered, and a nil set (a Router
// of Dial) remembers nothing.
func TestRefusalsAreBounded(t *testing.T) {
	var s refusals
	for i := range maxRefused + 10 {
		s.add(uint64(i))
	}
	if s.len() != maxRefused || s.has(maxRefused+1) || !s.has(0) {
		t.Fatalf("remembered %d, want %d, the first ones", s.len(), maxRefused)
	}
	var none *refusals
	none.add(1)
	if none.has(1) || none.len() != 0 {
		t.Fatal("a nil set remembered a refusal")
	}
}
