package replication

import (
	"context"
	"log/slog"
	"time"

	"github.com/cdc-router/cdc-router/metrics"
)

// standbyProbeInterval is how often a router standing by checks that it could take over (Config.StandbyProbe).
// Its PostgreSQL it reaches at each try to take the slot, every standbyRetry.
const standbyProbeInterval = 30 * time.Second

// standbyProbeTimeout bounds one check: a broker that accepts TCP and says nothing is a failed check.
const standbyProbeTimeout = 10 * time.Second

// spareProbe checks, while the router stands by, that it could take over: a standby that cannot reach its
// broker, or whose user may not declare its topology, would answer /readyz 200 until the active router went
// and then fail, so a rolling update gated on readiness would replace a working router by one that cannot
// publish (a wrong --amqp-url, a revoked permission). A failed check makes /readyz 503 with its sentence
// (metrics.Stats.SetStandbyProblem), logged as a WARN when it begins or changes; an INFO says when it
// clears. It never stops the router from taking over: the slot's events wait for whichever router holds it.
type spareProbe struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// startSpareProbe runs probe at once and then every standbyProbeInterval until stop, or until the router is no
// longer standing by (it took the slot, or restarts).
func startSpareProbe(ctx context.Context, probe func(context.Context) error, log *slog.Logger, stats *metrics.Stats) *spareProbe {
	ctx, cancel := context.WithCancel(ctx)
	p := &spareProbe{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		failing := ""
		standing := func() bool { state, _, _ := stats.State(); return state == metrics.StateStandby }
		for standing() {
			pctx, end := context.WithTimeout(ctx, standbyProbeTimeout)
			err := probe(pctx)
			end()
			if ctx.Err() != nil || !standing() {
				return
			}
			switch {
			case err != nil && err.Error() != failing:
				failing = err.Error()
				log.Warn("standing by, but this router could not take over the slot: "+failing, "retry", standbyProbeInterval.String())
			case err == nil && failing != "":
				failing = ""
				log.Info("standing by: the check that this router could take over the slot succeeds again")
			}
			if failing != "" {
				stats.SetStandbyProblem("standing by, but this router could not take over the slot: " + failing)
			} else {
				stats.SetStandbyProblem("")
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(standbyProbeInterval):
			}
		}
	}()
	return p
}

// running reports whether the checks go on; a nil p's do not.
func (p *spareProbe) running() bool {
	if p == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// stop ends the checks and waits for the one running; a nil p is stopped already.
func (p *spareProbe) stop() {
	if p == nil {
		return
	}
	p.cancel()
	<-p.done
}
