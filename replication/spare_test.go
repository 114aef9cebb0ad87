package replication

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/metrics"
)

// TestSpareProbeMakesAStandbyUnready: while a router stands by, a failing check makes its problem (and so
// /readyz) say that it could not take over, logged as a WARN; a check that succeeds leaves no problem; a
// problem is not kept once the router no longer stands by, nor set then.
func TestSpareProbeMakesAStandbyUnready(t *testing.T) {
	var out testenv.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	stats := &metrics.Stats{}
	stats.SetState(metrics.StateStandby, nil)
	var fail atomic.Bool
	var calls atomic.Int32
	fail.Store(true)
	probe := func(context.Context) error {
		calls.Add(1)
		if fail.Load() {
			return errors.New("RabbitMQ refused the login of user \"guest\"")
		}
		return nil
	}
	p := startSpareProbe(context.Background(), probe, log, stats)
	defer p.stop()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 5 s (problem %q, log:\n%s)", what, stats.Problem(), out.String())
			}
		}
	}
	waitFor("the first check's problem", func() bool {
		return strings.Contains(stats.Problem(), "could not take over the slot: RabbitMQ refused the login")
	})
	if !p.running() {
		t.Fatal("the checks stopped while the router stands by")
	}
	if n := strings.Count(out.String(), "level=WARN"); n != 1 {
		t.Errorf("%d warnings after the first failed check, want 1:\n%s", n, out.String())
	}
	stats.SetState(metrics.StateStreaming, nil)
	if got := stats.Problem(); got != "" {
		t.Errorf("streaming, the problem is %q: a standby's problem must not outlive standing by", got)
	}
	stats.SetStandbyProblem("late")
	if got := stats.Problem(); got != "" {
		t.Errorf("streaming, a standby problem set late reads %q", got)
	}
	p.stop()
	stats.SetState(metrics.StateStandby, nil)
	fail.Store(false)
	q := startSpareProbe(context.Background(), probe, log, stats)
	defer q.stop()
	waitFor("the check that succeeds", func() bool { return calls.Load() >= 2 })
	if got := stats.Problem(); got != "" {
		t.Errorf("after a check that succeeded the problem is %q", got)
	}
	stats.SetState(metrics.StateRestarting, nil)
	q.cancel() // the next turn of the loop would end on the state too; stop waits for it
	q.stop()
	if q.running() {
		t.Error("the checks go on after stop")
	}
}
