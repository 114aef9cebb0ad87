package replication

import (
	"errors"
	"io"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// causedError marks the cause of a stream failure for cdc_router_stream_restarts_total; its text is the
// wrapped error's.
type causedError struct {
	cause string
	err   error
}

func caused(cause string, err error) error {
	if errors.Is(err, errFenced) { // the Router reports it, but it is the slot's lease that lapsed (fence.go)
		cause = metrics.CausePostgres
	}
	return &causedError{cause: cause, err: err}
}

func (e *causedError) Error() string { return e.err.Error() }
func (e *causedError) Unwrap() error { return e.err }

// causeOf classifies a stream failure: marked ones by their mark, pgserver.Retryable, PostgreSQL's errors,
// failed network connections, timeouts, connections pgx closed after one, a connection that ended in the middle of a
// message (io.ErrUnexpectedEOF; the broker's are marked) and PostgreSQL's refusals of a connection
// (only PostgreSQL's are not marked) as postgres, anything else as other.
func causeOf(err error) string {
	var c *causedError
	if errors.As(err, &c) {
		return c.cause
	}
	var r *pgserver.Retryable
	if errors.As(err, &r) { // pgserver's transient failures, each naming the server: a bound that passed, no primary
		return metrics.CausePostgres
	}
	if errors.Is(err, cdc.ErrBroker) { // the snapshot's publisher: its lost connection is no PostgreSQL error
		return metrics.CauseBroker
	}
	var pgErr *pgconn.PgError
	var connErr *pgconn.ConnectError
	var netErr net.Error
	if errors.As(err, &pgErr) || errors.As(err, &connErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) {
		return metrics.CausePostgres
	}
	// pgserver's explainConnect words a refusal it has no fix for ("the database system is starting up",
	// "too many clients already") as one sentence ending in its SQLSTATE, without wrapping the *pgconn.PgError.
	if strings.Contains(err.Error(), "(SQLSTATE ") {
		return metrics.CausePostgres
	}
	return metrics.CauseOther
}
