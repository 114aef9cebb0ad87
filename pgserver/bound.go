package pgserver

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
)

// IsFatal reports whether err is a refusal that retrying cannot fix: a *cdc.Fatal, or a *migrations.Problem
// of the start-up checks.
func IsFatal(err error) bool {
	var f *cdc.Fatal
	var p *migrations.Problem
	return errors.As(err, &f) || errors.As(err, &p)
}

// SetupStep runs one step of the start-up checks on connections just made to host, with a context that ends
// after d: a server that stops answering then fails the step with a *Retryable naming the server and the
// bound, instead of holding the start without bound. Other errors, and those of a ctx that ended, are
// returned as they are.
func SetupStep(ctx context.Context, d time.Duration, host string, step func(context.Context) error) error {
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	err := step(sctx)
	if err == nil || ctx.Err() != nil || !errors.Is(sctx.Err(), context.DeadlineExceeded) || IsFatal(err) {
		return err
	}
	return &Retryable{Msg: fmt.Sprintf("PostgreSQL at %s did not answer the router's start-up "+
		"checks within %v (a stalled server or a silent network partition); the router tries again (the bound is "+
		"--pg-timeout)", host, d), Err: err}
}

// Stalled names host in a stream failure of PostgreSQL's that is a timeout on one of its connections (the
// stored position, a quarantine write, a slot health read that held up the loop), as a *Retryable: to the
// operator it is a PostgreSQL that stopped answering, whichever wait saw it first. Other errors are returned
// as they are.
func Stalled(err error, host string) error {
	var r *Retryable
	if err == nil || errors.As(err, &r) || IsFatal(err) {
		return err
	}
	switch {
	case pgconn.Timeout(err) || errors.Is(err, context.DeadlineExceeded):
		return &Retryable{Msg: fmt.Sprintf("PostgreSQL at %s stopped answering (%v): a stalled server "+
			"or a silent network partition; the router restarts the stream (the bound of each wait is --pg-timeout)", host, err), Err: err}
	case errors.Is(err, pgconn.ErrConnClosed):
		return &Retryable{Msg: fmt.Sprintf("the connection to PostgreSQL at %s was closed after a wait "+
			"on it failed (%v): the router restarts the stream", host, err), Err: err}
	}
	return err
}
