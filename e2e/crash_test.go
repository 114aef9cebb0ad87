package e2e

import (
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// ackedPosition is what PostgreSQL and the router's table say was acknowledged for the slot.
func (e *env) ackedPosition() cdc.LSN {
	e.t.Helper()
	var best cdc.LSN
	for _, q := range []string{
		`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`,
		`SELECT lsn::text FROM cdc_router.positions WHERE slot = $1`,
	} {
		if s := e.scalar(q, e.slot); s != "" {
			l, err := cdc.ParseLSN(s)
			if err != nil {
				e.t.Fatal(err)
			}
			best = max(best, l)
		}
	}
	return best
}

// writeInBackground writes total rows in small transactions while the test does something else.
func writeInBackground(w *writer, total int) (wait func()) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.write(total, 20, 2*time.Millisecond) }()
	return wg.Wait
}

// writeUntilStopped writes small transactions until stop is called, which waits for the writer.
func writeUntilStopped(w *writer) (stop func()) {
	done, quit := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
				w.write(20, 20, 5*time.Millisecond)
			}
		}
	}()
	return func() { close(quit); <-done }
}

// TestSIGKILLLosesNothing kills the router in the middle of a stream: after a restart every event arrives,
// and only events that had not been acknowledged come twice.
func TestSIGKILLLosesNothing(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	w := newWriter(t, e.pgURL, 50)
	wait := writeInBackground(w, 6000)
	time.Sleep(1500 * time.Millisecond)
	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	acked := e.ackedPosition()
	time.Sleep(500 * time.Millisecond)
	r2 := e.start("")
	r2.waitLog("msg=streaming ", 60*time.Second)
	wait()
	got := c.waitFor(t, w.rows, 90*time.Second)
	dups, ids := duplicates(got)
	t.Logf("SIGKILL: %d events, %d deliveries, %d duplicates, acknowledged at kill %v", len(w.rows), len(got), dups, acked)
	commit := map[string]cdc.LSN{}
	for _, d := range got {
		if s, ok := d.msg.Headers["commit_lsn"].(string); ok {
			commit[d.id], _ = cdc.ParseLSN(s)
		}
	}
	for _, id := range ids {
		if commit[id] < acked {
			t.Errorf("event %s (commit %v) was acknowledged (%v) before the kill but delivered twice", id, commit[id], acked)
			break
		}
	}
	checkOrder(t, got)
}

// TestSIGTERMThenRestartHasNoDuplicates stops the router gracefully mid-stream: it reads to the commit of
// the open transaction, waits for confirms and acknowledges, so the restart republishes nothing.
func TestSIGTERMThenRestartHasNoDuplicates(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	r := e.startStreaming()
	w := newWriter(t, e.pgURL, 50)
	wait := writeInBackground(w, 6000)
	time.Sleep(1500 * time.Millisecond)
	signalled := time.Now()
	r.signal(syscall.SIGTERM)
	if code := r.wait(40 * time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM, want 0", code)
	}
	r2 := e.start("")
	r2.waitLog("msg=streaming ", 60*time.Second)
	wait()
	got := c.waitFor(t, w.rows, 90*time.Second)
	dups, _ := duplicates(got)
	t.Logf("SIGTERM: %d events, %d deliveries, %d duplicates, stop took %v", len(w.rows), len(got), dups,
		r.ExitAt.Sub(signalled).Round(time.Millisecond))
	if dups != 0 {
		t.Errorf("%d duplicates after a graceful restart, want 0", dups)
	}
	checkOrder(t, got)
}
