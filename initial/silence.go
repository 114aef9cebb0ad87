package initial

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/pgserver"
)

// watch bounds a copy's waits on a PostgreSQL that accepts TCP but does not answer. A copy waits on
// PostgreSQL for as long as a page query runs, and a page query may run long on a healthy server (a
// selective --snapshot-where, a cold cache), so its queries are not given a deadline. Instead, every
// half of PGTimeout, a probe connects on a connection of its own and runs SELECT 1; a probe that cannot
// reach PostgreSQL (no answer within PGTimeout, or nothing listening: then the copy's own connection may be
// half-open, waiting for ever) ends the copy: watch's context is cancelled, which ends every wait of the copy
// (the reader's queries, the progress store, the quarantine), and end returns a pgserver.Retryable that
// names the server, so the run restarts (cause postgres) and resumes the copy from its stored progress.
// A probe that is answered, even with an error (too many clients, a standby), leaves the copy alone.
// end returns err otherwise; it must be called once, when the copy returns.
func (c Config) watch(ctx context.Context) (wctx context.Context, end func(err error) error) {
	if c.PGTimeout <= 0 {
		return ctx, func(err error) error { return err }
	}
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(c.PGTimeout / 2)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			if err := c.probe(wctx); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return wctx, func(err error) error {
		close(done)
		cause := context.Cause(wctx)
		cancel(nil)
		var silent *pgserver.Retryable
		if ctx.Err() == nil && errors.As(cause, &silent) {
			return silent
		}
		return err
	}
}

// probe returns a pgserver.Retryable when it cannot reach PostgreSQL (pgserver words a connection that
// failed without PostgreSQL's answer so) or SELECT 1 gets no answer within PGTimeout, and nil when
// PostgreSQL answers, whatever the answer (or when ctx ends first).
func (c Config) probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, c.PGTimeout)
	defer cancel()
	conn, err := pgserver.ConnectReaderWithin(pctx, c.PGURL, c.PGTimeout)
	var silent *pgserver.Retryable
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.As(err, &silent):
		return &pgserver.Retryable{Msg: "the initial snapshot stopped waiting on PostgreSQL: " + silent.Msg, Err: silent}
	case err != nil:
		return nil // answered: a refusal is no silence
	}
	_, err = conn.Exec(pctx, "SELECT 1")
	closeCtx, cancelClose := context.WithTimeout(context.Background(), time.Second)
	defer cancelClose()
	conn.Close(closeCtx)
	if err != nil && ctx.Err() == nil && pctx.Err() != nil {
		return &pgserver.Retryable{Msg: fmt.Sprintf("the initial snapshot stopped waiting on PostgreSQL at %s: it did "+
			"not answer SELECT 1 within %v (a stalled server or a silent network partition); the router tries again "+
			"and resumes the copy from its stored progress (the bound is --pg-timeout)", hostOf(c.PGURL), c.PGTimeout),
			Err: err}
	}
	return nil
}

// hostOf names the server of url for a message (its first host and port), or "the server".
func hostOf(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil || cfg.Host == "" {
		return "the server"
	}
	return fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)
}
