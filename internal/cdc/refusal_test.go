package cdc

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"
)

type refusal struct{ per, state bool }

func (r refusal) Error() string {
	return fmt.Sprintf("refused (per message %v, broker state %v)", r.per, r.state)
}
func (r refusal) PerMessage() bool  { return r.per }
func (r refusal) BrokerState() bool { return r.state }

// TestRefusalsCondemn: a close one message causes condemns its event after StrikesToQuarantine strikes; a
// return or a nack (the broker's state) only once a strike came Period or more after the first as well
// (time passing without a try condemns nothing); other errors neither count nor forgive; a confirm forgives.
func TestRefusalsCondemn(t *testing.T) {
	now := time.Unix(1e9, 0)
	r := NewRefusals(time.Minute)
	r.now = func() time.Time { return now }
	closeErr := fmt.Errorf("publish: %w", refusal{per: true})
	returned := fmt.Errorf("publish: %w", refusal{per: true, state: true})
	for i := range StrikesToQuarantine {
		if _, ok := r.Condemned("a"); ok {
			t.Fatalf("condemned after %d strikes", i)
		}
		r.Strike("a", closeErr)
		r.Strike("a", errors.New("connection lost"))
		r.Strike("a", refusal{})
	}
	if reason, ok := r.Condemned("a"); !ok || reason != closeErr.Error() {
		t.Fatalf("Condemned(a) = %q, %v", reason, ok)
	}
	for range StrikesToQuarantine + 5 {
		r.Strike("b", returned)
		now = now.Add(5 * time.Second)
	}
	if _, ok := r.Condemned("b"); ok {
		t.Fatal("a return condemned before the period passed")
	}
	now = now.Add(25 * time.Second) // the period is over, but no try has found the broker refusing since
	if _, ok := r.Condemned("b"); ok {
		t.Fatal("a return condemned by time alone, without a try after the period")
	}
	r.Strike("b", returned)
	reason, ok := r.Condemned("b")
	if !ok || !strings.Contains(reason, "retried 9 times over 1m5s") {
		t.Fatalf("Condemned(b) = %q, %v after a refusal at the period's end", reason, ok)
	}
	r.Clear("b")
	if n, _ := r.Struck("b"); n != 0 {
		t.Fatal("Clear kept the strikes")
	}
	if NewRefusals(0).Period != DefaultRefusalRetry {
		t.Fatal("the default period")
	}
}
