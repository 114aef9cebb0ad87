package runner

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
)

// Runner consumes cdc-router's events from RabbitMQ and processes each with an inbox.Processor. It owns the
// broker side a consumer would otherwise write by hand:
//   - it connects to the first of Config.URLs that answers, waits until the router has declared
//     the exchange (never declaring it), declares the queue durable, binds it, and consumes with manual
//     acknowledgements; on any connection or channel loss it does all of that again, with capped
//     exponential backoff and jitter, and logs the broker's reason;
//   - it dispatches deliveries by aggregate inside the process: the events of one aggregate are
//     processed one at a time, in delivery order, while other aggregates proceed on other workers;
//   - it acknowledges a delivery only after Process returned an outcome whose Ack is true, so after its
//     transaction committed;
//   - a delivery whose Process returns an error is retried after a backoff of its own while the other
//     aggregates go on and the later events of its aggregate wait behind it; the attempt cap is
//     inbox.Config.MaxAttempts, after which Process returns the Failed outcome and the delivery is acked;
//   - a Gap outcome (policy Requeue) is requeued after a backoff of its own, from a timer, so that its
//     aggregate's missing event, which may be right behind it, is processed meanwhile;
//   - on a graceful stop it stops consuming, lets the handlers in flight finish (their context is not
//     cancelled until Config.DrainTimeout) and requeues every delivery it did not process.
type Runner struct {
	p   *inbox.Processor
	cfg Config
	log *slog.Logger
	m   *runnerMetrics
}

// New returns a Runner that processes deliveries with p. It registers the runner's metrics with
// cfg.Registerer, if set. A nil logger discards logs.
func New(p *inbox.Processor, cfg Config, log *slog.Logger) (*Runner, error) {
	if p == nil {
		return nil, fmt.Errorf("inbox runner: New needs a Processor (inbox.New)")
	}
	cfg = cfg.Defaults()
	if cfg.ConnectionName == "" {
		cfg.ConnectionName = "cdc-router inbox " + p.Config().Consumer
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("consumer", p.Config().Consumer, "queue", cfg.Queue)
	m, err := newRunnerMetrics(cfg.Registerer, p, log, cfg.Partitions > 0)
	if err != nil {
		return nil, err
	}
	return &Runner{p: p, cfg: cfg, log: log, m: m}, nil
}

// Run consumes until ctx is cancelled, then stops gracefully and returns nil. If New could not reach
// PostgreSQL, Run first waits for it (inbox.Config.Prepare and Check, retried with the RetryMin..RetryMax
// backoff, a warning per attempt) before it connects to the broker. It returns an error only for a
// setup that retrying cannot cure (a broker's access refusal, a queue that exists with other
// arguments, an inbox schema that is missing or out of date), after stopping as gracefully. Connection and channel losses are retried, not
// returned. Call Run once per Runner.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.waitPostgres(ctx); err != nil || ctx.Err() != nil {
		r.log.Info("inbox runner stopped")
		return err
	}
	// Handlers run under work, which a stop does not cancel: only the drain timeout does.
	work, cancelWork := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelWork()
	d := newDispatcher(r, work)
	var workers sync.WaitGroup
	for range r.cfg.Workers {
		workers.Go(d.loop)
	}
	requests, stopRequests := context.WithCancel(ctx)
	if r.cfg.RequestPoll > 0 {
		workers.Go(func() { r.serveRequests(requests) })
	}
	var s *session
	err := r.consume(ctx, d, &s)
	stopRequests()
	r.drain(d, cancelWork)
	workers.Wait()
	if s != nil {
		s.close(r.log)
	}
	r.log.Info("inbox runner stopped")
	return err
}

// consume runs sessions until ctx is cancelled (nil) or a setup fails for good. It leaves the last
// session open in *last so that the drain can still acknowledge.
func (r *Runner) consume(ctx context.Context, d *dispatcher, last **session) error {
	failures := 0
	for {
		s, err := r.connect(ctx)
		if err == nil {
			*last = s
			started := time.Now()
			err = s.consume(ctx, d)
			if ctx.Err() != nil {
				return nil
			}
			s.close(r.log)
			*last = nil
			if time.Since(started) > r.cfg.ReconnectMax {
				failures = 0 // the session worked for a while: start the backoff again
			}
		}
		switch {
		case ctx.Err() != nil:
			d.stop()
			return nil
		case isFatal(err):
			d.stop()
			return err
		}
		failures++
		wait := backoff(failures, r.cfg.ReconnectMin, r.cfg.ReconnectMax)
		r.log.Warn("inbox runner disconnected, reconnecting", "error", err, "delay", wait)
		sleep(ctx, wait)
	}
}

// drain waits for the dispatcher to hold no delivery, cancelling the handlers' context after the drain
// timeout, and then stops the workers.
func (r *Runner) drain(d *dispatcher, cancelWork context.CancelFunc) {
	d.stop()
	t := time.NewTimer(r.cfg.DrainTimeout)
	defer t.Stop()
	select {
	case <-d.idle:
	case <-t.C:
		r.log.Warn("inbox runner drain timeout: cancelling the handlers in flight; their deliveries are requeued",
			"drain_timeout", r.cfg.DrainTimeout)
		cancelWork()
		<-d.idle
	}
	d.close()
}
