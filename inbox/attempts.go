package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// attemptError is a failed attempt Process counted: n is the event's count so far.
type attemptError struct {
	n   int
	err error
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// parkedError is a non-permanent failure of a parked event's handler: the attempt is counted for that
// event, not for the one that closed its gap.
type parkedError struct {
	eventID string
	err     error
}

func (e *parkedError) Error() string { return e.err.Error() }
func (e *parkedError) Unwrap() error { return e.err }

// FailedAttempts reports how many failed attempts the inbox has counted so far for the event that err,
// an error returned by Process, is about (the parked event whose handler failed, when it was one);
// 0 when this failure was not counted (see Config.MaxAttempts). A consumer loop can base its backoff on
// it: the count is per event and durable, not per channel or process.
func FailedAttempts(err error) int {
	var a *attemptError
	if errors.As(err, &a) {
		return a.n
	}
	return 0
}

// countsAsAttempt reports whether a failure says something about the event: not when ctx ended (a
// shutdown), nor for contention and availability errors, which retrying cures whatever the event is.
// A statement timeout does count: a handler that always exceeds it would be retried forever.
func countsAsAttempt(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "53400":
			return false
		}
		return !strings.HasPrefix(pgErr.Code, "08")
	}
	return true
}

// failedAttempt handles an error of ev's transaction (rolled back): it counts the attempt in a short
// transaction of its own and, on the attempt that reaches MaxAttempts, records ev in the failed table
// and returns the Failed outcome. Otherwise it returns the error, counted or not.
func (p *Processor) failedAttempt(ctx context.Context, ev Event, cause error) (Result, error) {
	err := fmt.Errorf("process event %s: %w", ev.ID, cause)
	if !countsAsAttempt(ctx, cause) {
		return Result{}, err
	}
	id := ev.ID
	var pe *parkedError
	if errors.As(cause, &pe) {
		id = pe.eventID
	}
	var n int
	exhausted := false
	cerr := p.inTx(ctx, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, p.q.countAttempt, p.consumer, id, cause.Error()).Scan(&n); err != nil {
			return err
		}
		if id != ev.ID || p.cfg.MaxAttempts < 0 || n < p.cfg.MaxAttempts {
			return nil
		}
		exhausted = true
		return p.exhaust(ctx, tx, ev, n, cause)
	})
	switch {
	case cerr != nil:
		return Result{}, fmt.Errorf("%w (the attempt could not be counted: %v)", err, cerr)
	case exhausted:
		p.logExhausted(ev, n, cause)
		return Result{Outcome: Failed}, nil
	}
	return Result{}, &attemptError{n: n, err: fmt.Errorf("%w (attempt %d of %d)", err, n, p.cfg.MaxAttempts)}
}

// exhaust records ev in the failed table after its n-th failed attempt and ends its count.
func (p *Processor) exhaust(ctx context.Context, tx pgx.Tx, ev Event, n int, cause error) error {
	if _, err := tx.Exec(ctx, p.q.clearAttempts, p.consumer, ev.ID); err != nil {
		return fmt.Errorf("clear attempts: %w", err)
	}
	detail := fmt.Sprintf("gave up after %d attempts: %v", n, cause)
	return p.recordFailed(ctx, tx, ev, reasonExhausted, detail, nil, n)
}

func (p *Processor) logExhausted(ev Event, n int, cause error) {
	p.log.Error("inbox event failed too often, recorded as failed", "consumer", p.consumer, "event_id", ev.ID,
		"aggregate_type", ev.AggregateType, "aggregate_id", ev.AggregateID, "version", ev.AggregateVersion,
		"attempts", n, "error", cause)
}
