package runner

import (
	"context"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
)

// checkTimeout bounds each attempt to prepare the Processor while PostgreSQL does not answer, as
// inbox.New bounds its first.
const checkTimeout = 10 * time.Second

// waitPostgres returns once the Processor is ready: when New could not reach PostgreSQL it retries
// Prepare and Check with the backoff of a failing delivery (RetryMin doubling to RetryMax, jittered),
// logging each wait, until they pass (nil), ctx is cancelled (nil) or the schema is refused (the error).
func (r *Runner) waitPostgres(ctx context.Context) error {
	started := time.Now()
	for failures := 0; !r.p.Ready(); {
		attempt, cancel := context.WithTimeout(ctx, checkTimeout)
		err := r.p.Prepare(attempt)
		cancel()
		switch {
		case err == nil:
			r.log.Info("inbox runner: PostgreSQL answers, the inbox schema is up to date", "waited",
				time.Since(started).Round(time.Millisecond))
			return nil
		case ctx.Err() != nil:
			return nil
		case !inbox.Unreachable(err):
			return err
		}
		failures++
		wait := backoff(failures, r.cfg.RetryMin, r.cfg.RetryMax)
		r.log.Warn("inbox runner waiting for PostgreSQL", "error", err, "delay", wait, "attempt", failures)
		sleep(ctx, wait)
	}
	return nil
}

// serveRequests carries out the consumer's requests every RequestPoll until ctx ends; a request in
// progress finishes with its context intact. A failure to read them is logged once per run of failures.
func (r *Runner) serveRequests(ctx context.Context) {
	work := context.WithoutCancel(ctx)
	failing := false
	for {
		for ctx.Err() == nil {
			more, err := r.p.ServeRequest(work)
			if err != nil {
				if !failing {
					r.log.Warn("inbox runner cannot read its repair requests; it tries again", "error", err)
				}
				failing = true
				break
			}
			failing = false
			if !more {
				break
			}
		}
		sleep(ctx, r.cfg.RequestPoll)
		if ctx.Err() != nil {
			return
		}
	}
}
