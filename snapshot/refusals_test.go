package snapshot

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// TestRenewAfterStopsWhenTheLockIsGone: between two publishers the safety net waits its backoff; once the
// router loses its slot lock meanwhile (seed 8063: with a cut connection), replication's lease of the lock
// ends the copy's context, and the wait ends at once without dialling a publisher. Otherwise the wait
// lasts its backoff and then dials.
func TestRenewAfterStopsWhenTheLockIsGone(t *testing.T) {
	refusal := errors.New("nacked by the broker")
	var dialled atomic.Int32
	cfg := Config{Renew: func(context.Context) (Publisher, error) { dialled.Add(1); return nil, nil }}
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(200*time.Millisecond, func() { cancel(errors.New("the router lost the slot's lock")) })
	began := time.Now()
	_, err := renewAfter(ctx, cfg, 5*time.Second, refusal)
	if took := time.Since(began); err == nil || dialled.Load() != 0 || took > 2*time.Second {
		t.Fatalf("err %v, dialled %d after %v: want the wait ended at the lock's loss (200ms), no dial", err, dialled.Load(), took)
	}
	began = time.Now()
	if _, err := renewAfter(context.Background(), cfg, 600*time.Millisecond, refusal); err != nil || dialled.Load() != 1 {
		t.Fatalf("holding: err %v, dialled %d", err, dialled.Load())
	}
	if took := time.Since(began); took < 600*time.Millisecond {
		t.Errorf("holding: dialled after %v, before the backoff of 600ms", took)
	}
}
