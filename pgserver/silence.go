package pgserver

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Silence bounds the waits of a long copy (the initial snapshot, a backfill) on a PostgreSQL that
// accepts TCP but does not answer. A copy waits on PostgreSQL for as long as a page query runs, and a page
// query may run long on a healthy server (a selective predicate, a cold cache), so its queries are not
// given a deadline. Instead, every half of Timeout, a probe connects on a connection of its own and runs
// SELECT 1; a probe that cannot reach PostgreSQL (no answer within Timeout, or nothing listening: then the
// copy's own connection may be half-open, waiting for ever) ends the copy: Watch's context is cancelled,
// which ends every wait of the copy, and its end returns a *Retryable that names the server, Who and Then.
// A probe that is answered, even with an error (too many clients, a standby), leaves the copy alone.
type Silence struct {
	URL     string
	Timeout time.Duration // 0: no watch
	Who     string        // what stopped waiting, for the message: "the initial snapshot"
	Then    string        // what happens next, for the message: "the router tries again and resumes ..."
	// Waiting, when set, is told each probe's start (what the probe waits for and since when) and end ("" and
	// the zero time), so that readiness can say the server did not answer long before the probe gives up
	// (metrics.Stats.WaitOnPostgres: /readyz 503 after half the bound, at most 5 s).
	Waiting func(what string, since time.Time)
}

// every is how often Watch probes: every half of Timeout, at most every 5 s, so that with Waiting a silent
// server is unready within about 10 s whatever the bound (seed 8106 of the harness: a 30 s blackhole
// during an initial snapshot's last write, 30 s of /readyz 200 with --pg-timeout 30s).
func (s Silence) every() time.Duration { return min(s.Timeout/2, 5*time.Second) }

// Watch returns the copy's context and end, which returns the probe's *Retryable when the probe ended the
// copy, and err otherwise; end must be called once, when the copy returns.
func (s Silence) Watch(ctx context.Context) (wctx context.Context, end func(err error) error) {
	if s.Timeout <= 0 {
		return ctx, func(err error) error { return err }
	}
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		tick := time.NewTicker(s.every())
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-wctx.Done():
				return
			case <-tick.C:
			}
			if err := s.Probe(wctx); err != nil {
				cancel(err)
				return
			}
		}
	}()
	return wctx, func(err error) error {
		close(done)
		cause := context.Cause(wctx)
		cancel(nil)
		var silent *Retryable
		if ctx.Err() == nil && errors.As(cause, &silent) {
			return silent
		}
		return err
	}
}

// Probe returns a *Retryable when it cannot reach PostgreSQL (a connection that failed without
// PostgreSQL's answer) or SELECT 1 gets no answer within Timeout, and nil when PostgreSQL answers,
// whatever the answer (or when ctx ends first).
func (s Silence) Probe(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	if s.Waiting != nil {
		s.Waiting("answer "+s.Who+"'s probe (SELECT 1 on a connection of its own)", time.Now())
		defer s.Waiting("", time.Time{})
	}
	conn, err := ConnectReaderWithin(pctx, s.URL, s.Timeout)
	var silent *Retryable
	switch {
	case ctx.Err() != nil:
		return nil
	case errors.As(err, &silent):
		what, _, _ := strings.Cut(silent.Msg, "; the router tries again") // Then says what happens next
		return &Retryable{Msg: s.Who + " stopped waiting on PostgreSQL: " + what + "; " + s.Then, Err: silent}
	case err != nil:
		return nil // answered: a refusal is no silence
	}
	_, err = conn.Exec(pctx, "SELECT 1")
	closeCtx, cancelClose := context.WithTimeout(context.Background(), time.Second)
	defer cancelClose()
	conn.Close(closeCtx)
	if err != nil && ctx.Err() == nil && pctx.Err() != nil {
		return &Retryable{Msg: fmt.Sprintf("%s stopped waiting on PostgreSQL at %s: it did not answer SELECT 1 within "+
			"%v (a stalled server or a silent network partition); %s", s.Who, hostOfURL(s.URL), s.Timeout, s.Then), Err: err}
	}
	return nil
}

// hostOfURL names the servers of url for a message, or "the server".
func hostOfURL(url string) string {
	cfg, err := pgx.ParseConfig(url)
	if err != nil || cfg.Host == "" {
		return "the server"
	}
	return hostOf(&cfg.Config)
}
