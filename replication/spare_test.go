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
// /readyz) say that it could not take over, logged as a WARN; it shows only while standing by, is not set
// otherwise, and stands when the router stands by again after a restart; a check that succeeds clears it.
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
	stats.SetState(metrics.StateRestarting, nil) // a PostgreSQL blip, then the slot busy again
	stats.SetState(metrics.StateStandby, nil)
	if got := stats.Problem(); !strings.Contains(got, "could not take over") {
		t.Errorf("standing by again before the next check, the problem is %q: the last check's failure must stand", got)
	}
	p.stop()
	fail.Store(false)
	q := startSpareProbe(context.Background(), probe, log, stats)
	defer q.stop()
	waitFor("the check that succeeds", func() bool { return calls.Load() >= 2 && stats.Problem() == "" })
	stats.SetState(metrics.StateRestarting, nil)
	q.stop()
	if q.running() {
		t.Error("the checks go on after stop")
	}
}
