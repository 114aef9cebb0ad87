package route

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"
)

// testFence is a Fence the test opens and closes.
type testFence struct {
	mu            sync.Mutex
	check, broken error
}

func (f *testFence) Check() error  { f.mu.Lock(); defer f.mu.Unlock(); return f.check }
func (f *testFence) Broken() error { f.mu.Lock(); defer f.mu.Unlock(); return f.broken }

func (f *testFence) set(check, broken error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.check, f.broken = check, broken
}

// TestFenceStopsWrites: while Config.Fence lets writes go, events are published; once Check says no, the
// Router fails with its error naming the event, and that event never reaches the queue; once Broken says no
// (a pause after the lane's check), the write itself is refused and the event never reaches the queue either.
func TestFenceStopsWrites(t *testing.T) {
	for _, tc := range []struct {
		name          string
		check, broken error
	}{
		{"check", errors.New("the lease lapsed"), nil},
		{"broken", nil, errors.New("the process was paused")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBroker(t)
			cfg := b.config("")
			f := &testFence{}
			cfg.Fence = f
			r := b.dial(cfg)
			q := b.queue("fenced.#", nil)
			c := newCounter()
			first, second := event("fenced", "1", 1), event("fenced", "1", 2)
			publishAll(t, r, c, first)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := r.Drain(ctx); err != nil {
				t.Fatalf("Drain with the fence open: %v", err)
			}
			f.set(tc.check, tc.broken)
			_ = r.Publish(ctx, second, c.done(second.ID))
			err := waitFailed(t, r, 10*time.Second)
			want := tc.check
			if want == nil {
				want = tc.broken
			}
			if !strings.Contains(err.Error(), want.Error()) {
				t.Errorf("Err = %v, want the fence's %q", err, want)
			}
			if tc.check != nil && !strings.Contains(err.Error(), second.ID) {
				t.Errorf("Err = %v, want it to name the event not written (%s)", err, second.ID)
			}
			if c.count(second.ID) != 0 {
				t.Errorf("done called for the fenced event")
			}
			d, ok, err := b.admin.Get(q, true)
			if err != nil || !ok || d.MessageId != first.ID {
				t.Fatalf("first message in the queue: ok=%v err=%v id=%q, want %s", ok, err, d.MessageId, first.ID)
			}
			time.Sleep(500 * time.Millisecond)
			if d, ok, _ := b.admin.Get(q, true); ok {
				t.Errorf("the fenced event reached the queue: %s", d.MessageId)
			}
		})
	}
}
