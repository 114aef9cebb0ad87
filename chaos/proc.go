package chaos

import (
	"fmt"

	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/chaos/procs"
)

// routerArgs are the flags of `cdc-router run` for slot i.
func (w *world) routerArgs(i int) []string {
	s := w.plan.Setup
	args := []string{"run", "--log-level", "info", "--progress-interval", "5s", "--shutdown-timeout", "20s",
		"--lanes", fmt.Sprint(s.Lanes), "--window", fmt.Sprint(s.Window), "--unroutable-queue-type", s.UnroutableType}
	for _, t := range s.Tables {
		args = append(args, "--table", t)
	}
	if s.Shards > 0 {
		args = append(args, "--shard", fmt.Sprintf("%d/%d", i, s.Shards))
	}
	if s.AggregateWindow > 1 {
		args = append(args, "--aggregate-window", fmt.Sprint(s.AggregateWindow))
	}
	if w.shortRefusals() {
		args = append(args, "--refusal-retry", refusalRetry)
	}
	args = append(args, w.mappingFlags()...)
	if s.Emit {
		args = append(args, "--message-prefix", messagePrefix)
	}
	if s.OnDriftQuarantine || w.drifted.Load() {
		args = append(args, "--on-drift", "quarantine")
	}
	if w.plan.Has(gen.FaultPause) {
		args = append(args, "--lease", gen.PauseLease.String())
	}
	if d := w.plan.PublicationCheck; d > 0 {
		args = append(args, "--publication-check-interval", d.String())
	}
	return args
}

// spec is how process k runs (standby.go: process k serves slot slotOf(k)) on httpAddr.
func (w *world) spec(k int, httpAddr string) procs.Spec {
	return procs.Spec{
		Args: append(w.routerArgs(w.slotOf(k)), "--http-addr", httpAddr),
		Env: []string{"CDC_ROUTER_PG_URL=" + w.pgURLOf(k), "CDC_ROUTER_AMQP_URL=" + w.proxiedAMQPURL(),
			"CDC_ROUTER_SLOT=" + w.db, "CDC_ROUTER_EXCHANGE=" + w.exchange},
		Router: w.slotOf(k), Proc: k / w.plan.Setup.Routers(),
	}
}
