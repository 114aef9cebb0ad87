package migrations

import (
	"testing"
	"time"
)

// TestEmitKeyWatch: the reloads come at least every EmitKeyInterval (sooner with a shorter interval), which
// leaves a router time to hold a rotated key before it signs (EmitKeyDelay); a reload is due only once per
// interval.
func TestEmitKeyWatch(t *testing.T) {
	if EmitKeyInterval*2 > EmitKeyDelay {
		t.Fatalf("EmitKeyInterval %v leaves too little of EmitKeyDelay %v to hold a rotated key", EmitKeyInterval, EmitKeyDelay)
	}
	if w := NewEmitKeyWatch("s", time.Hour, nil); w.interval != EmitKeyInterval {
		t.Errorf("interval %v with a longer check interval, want %v", w.interval, EmitKeyInterval)
	}
	w := NewEmitKeyWatch("s", 20*time.Millisecond, nil)
	if w.Due() {
		t.Fatal("a reload was due at once")
	}
	time.Sleep(25 * time.Millisecond)
	if !w.Due() || w.Due() {
		t.Fatal("want one reload due after the interval, and not a second at once")
	}
}
