package snapshot

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestRenewAfterStopsWhenTheLockIsGone: between two publishers the safety net asks Config.Holds; once it
// fails (the slot lock went with a cut connection: seed 8063), the wait ends at once with the refusal and
// that loss, and no publisher is dialled. While it holds, the wait lasts its backoff and then dials.
func TestRenewAfterStopsWhenTheLockIsGone(t *testing.T) {
	refusal := errors.New("nacked by the broker")
	var dialled, asked atomic.Int32
	cfg := Config{Renew: func(context.Context) (Publisher, error) { dialled.Add(1); return nil, nil }}
	cfg.Holds = func(context.Context) error {
		if asked.Add(1) > 1 {
			return errors.New("conn closed")
		}
		return nil
	}
	began := time.Now()
	_, err := renewAfter(context.Background(), cfg, 5*time.Second, refusal)
	took := time.Since(began)
	if err == nil || !errors.Is(err, refusal) || !strings.Contains(err.Error(), "lost its slot") || dialled.Load() != 0 {
		t.Fatalf("err %v, dialled %d: want the refusal and the lost slot, no dial", err, dialled.Load())
	}
	if took > 2*time.Second {
		t.Errorf("the lost lock ended the 5 s wait after %v, want about %v", took, 2*holdsEvery)
	}
	cfg.Holds = func(context.Context) error { return nil }
	began = time.Now()
	if _, err := renewAfter(context.Background(), cfg, 600*time.Millisecond, refusal); err != nil || dialled.Load() != 1 {
		t.Fatalf("holding: err %v, dialled %d", err, dialled.Load())
	}
	if took := time.Since(began); took < 600*time.Millisecond {
		t.Errorf("holding: dialled after %v, before the backoff of 600ms", took)
	}
}
