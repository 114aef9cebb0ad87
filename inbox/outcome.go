package inbox

import (
	"errors"
	"fmt"
)

// Outcome is what became of one event. Every outcome except Gap is final: the delivery is acknowledged.
type Outcome int

const (
	// Applied: the handler ran and committed together with the inbox row, followed by any parked events
	// the event unblocked (Result.Unparked).
	Applied Outcome = iota + 1
	// Duplicate: the event id was already in the inbox with the same fingerprint. Nothing was written.
	Duplicate
	// Stale: a new event id whose version is at or below the applied or baseline version. Its inbox row
	// was recorded; the handler did not run.
	Stale
	// Parked: the event is ahead of a gap and waits in the parked table (policy Park).
	Parked
	// Gap: the event is ahead of a gap and nothing was written (policy Requeue); requeue the delivery.
	Gap
	// Conflict: the event id was already in the inbox with a different fingerprint. The event was not
	// applied; it was recorded in the failed table with both fingerprints. Redelivery cannot change
	// that, so the delivery is acknowledged: the failed table, not the queue, holds it for repair.
	Conflict
	// Failed: the event was malformed, its handler returned a Permanent error, or it failed
	// Config.MaxAttempts times. It was recorded in the failed table without an inbox row (so a replay
	// after the fix is processed, and RetryFailed or ResolveFailed can settle it) and acknowledged.
	Failed
)

// String names the outcome in lower case, as logs and test output print it.
func (o Outcome) String() string {
	switch o {
	case Applied:
		return "applied"
	case Duplicate:
		return "duplicate"
	case Stale:
		return "stale"
	case Parked:
		return "parked"
	case Gap:
		return "gap"
	case Conflict:
		return "conflict"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Ack reports whether a delivery with this outcome is acknowledged (true) or requeued (false).
func (o Outcome) Ack() bool { return o != Gap }

// Result is the outcome of Process and the aggregate's state after it.
type Result struct {
	Outcome Outcome
	// Version is the aggregate's applied version after the transaction (0 for Duplicate, Conflict and
	// Failed, which do not read it).
	Version int64
	// Unparked counts the parked events applied in the same transaction because this one closed a gap.
	Unparked int
}

// PermanentError marks a handler error that redelivery cannot fix (a payload the handler cannot read,
// a business rule the event breaks). Process records such an event in the failed table and returns the
// Failed outcome instead of an error.
type PermanentError struct{ Err error }

// Error returns the wrapped error's text.
func (e *PermanentError) Error() string { return "permanent: " + e.Err.Error() }

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

// Permanent wraps err so that Process treats it as permanent. It returns nil for a nil err.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// IsPermanent reports whether err, or an error it wraps, was made with Permanent or is ErrMalformed.
func IsPermanent(err error) bool {
	var p *PermanentError
	return errors.As(err, &p) || errors.Is(err, ErrMalformed)
}
