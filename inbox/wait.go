package inbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// prepare runs Config.Prepare in a transaction of its own, then Check, and marks the Processor ready
// when both pass.
func (p *Processor) prepare(ctx context.Context) error {
	if p.cfg.Prepare != nil {
		err := p.inTxWith(ctx, "", func(tx pgx.Tx) error { return p.cfg.Prepare(ctx, tx) })
		if err != nil {
			return fmt.Errorf("inbox Config.Prepare: %w", err)
		}
	}
	if err := p.Check(ctx); err != nil {
		return err
	}
	p.ready.Store(true)
	return nil
}

// unreachable reports an error that says PostgreSQL does not answer yet (not listening, starting up or
// shutting down, out of connections, a lost or timed-out connection), which waiting cures; a refused
// login, a missing database or a missing privilege is not.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch c := pgErr.Code; {
		case c == "57P01", c == "57P02", c == "57P03", c == "53300", strings.HasPrefix(c, "08"):
			return true
		}
		return false
	}
	var connErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, pgconn.ErrConnClosed)
}

// waitPostgres returns once the Processor is ready: when New could not reach PostgreSQL it retries
// Prepare and Check with the backoff of a failing delivery (RetryMin doubling to RetryMax, jittered),
// logging each wait, until they pass (nil), ctx is cancelled (nil) or the schema is refused (the error).
func (r *Runner) waitPostgres(ctx context.Context) error {
	started := time.Now()
	for failures := 0; !r.p.ready.Load(); {
		attempt, cancel := context.WithTimeout(ctx, checkTimeout)
		err := r.p.prepare(attempt)
		cancel()
		switch {
		case err == nil:
			r.log.Info("inbox runner: PostgreSQL answers, the inbox schema is up to date", "waited",
				time.Since(started).Round(time.Millisecond))
			return nil
		case ctx.Err() != nil:
			return nil
		case !unreachable(err):
			return err
		}
		failures++
		wait := backoff(failures, r.cfg.RetryMin, r.cfg.RetryMax)
		r.log.Warn("inbox runner waiting for PostgreSQL", "error", err, "delay", wait, "attempt", failures)
		sleep(ctx, wait)
	}
	return nil
}
