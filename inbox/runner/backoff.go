package runner

import (
	"context"
	"math/rand/v2"
	"time"
)

// backoff is the wait before requeueing after the n-th consecutive failure (n >= 1): exponential from
// lo, capped at hi, with the upper half jittered so that consumers do not retry in step.
func backoff(n int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 1; i < n && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	if d <= 1 {
		return d
	}
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
