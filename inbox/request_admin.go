package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

var (
	// ErrRequestNotFound reports a request id that this consumer has no request of.
	ErrRequestNotFound = errors.New("no inbox request with this id")
	// ErrRequestNotWaiting reports a request that can no longer be cancelled: a Runner took it, and
	// carried it out or is carrying it out.
	ErrRequestNotWaiting = errors.New("inbox request is no longer waiting")
)

// RefusedError is why a Runner did not carry out a request: its premise no longer held when it ran (the
// parked event was applied meanwhile, a missing version arrived, the failed record was settled).
// Nothing was changed; the request's outcome is OutcomeRefused.
type RefusedError struct{ Reason string }

// Error returns the reason.
func (e *RefusedError) Error() string { return "refused: " + e.Reason }

// FiledRequest is one row of the requests table.
type FiledRequest struct {
	ID int64
	Request
	FiledAt     time.Time
	ExpiresAt   time.Time // zero when it never expires
	CancelledBy string
	RequestState
}

// Requests lists this consumer's requests, newest first, at most limit of them (100 when limit <= 0).
func (a *Admin) Requests(ctx context.Context, limit int) ([]FiledRequest, error) {
	if limit <= 0 {
		limit = 100
	}
	var out []FiledRequest
	err := a.p.inTx(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, a.p.q.listRequests, a.p.consumer, limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (FiledRequest, error) {
			var f FiledRequest
			var expires *time.Time
			err := r.Scan(&f.ID, &f.Action, &f.Kind, &f.Target, &f.Note, &f.FiledAt, &f.FiledBy, &expires, &f.State,
				&f.Outcome, &f.Error, &f.CancelledBy)
			if expires != nil {
				f.ExpiresAt = *expires
			}
			f.Taken = f.State == RequestTaken || f.State == RequestDone
			f.Done = f.State == RequestDone
			return f, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list inbox requests: %w", err)
	}
	return out, nil
}

// Cancel withdraws request id so that no Runner ever carries it out, and returns the state it had
// ("waiting", "expired", or "cancelled" when it was cancelled already, which changes nothing). A
// request a Runner took is not cancelled: the error wraps ErrRequestNotWaiting and names its outcome.
// by names who cancels it, as Request.FiledBy does.
func (a *Admin) Cancel(ctx context.Context, id int64, by string) (string, error) {
	var before RequestState
	err := a.p.inTx(ctx, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, a.p.q.requestState+" FOR UPDATE", a.p.consumer, id).Scan(&before.Taken, &before.Done,
			&before.State, &before.Outcome, &before.Error)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("consumer %q: %w", a.p.consumer, ErrRequestNotFound)
		}
		if err != nil {
			return err
		}
		switch before.State {
		case RequestDone:
			outcome := before.Outcome
			if before.Error != "" {
				outcome += ": " + before.Error
			}
			return fmt.Errorf("%w: it was carried out already, outcome %s", ErrRequestNotWaiting, outcome)
		case RequestTaken:
			return fmt.Errorf("%w: a Runner is carrying it out now", ErrRequestNotWaiting)
		case RequestCancelled:
			return nil
		}
		_, err = tx.Exec(ctx, a.p.q.cancelRequest, a.p.consumer, id, by)
		return err
	})
	if err != nil {
		return "", fmt.Errorf("cancel inbox request %d: %w", id, err)
	}
	if before.State != RequestCancelled {
		a.p.log.Info("inbox request cancelled", "consumer", a.p.consumer, "request_id", id, "by", by)
	}
	return before.State, nil
}

// Expire makes request id expire now if no Runner took it yet, so that none ever does, and reports
// whether it did; false means a Runner took it (see State), or it was cancelled or had expired already.
// The command that filed it calls it when it gives up waiting.
func (a *Admin) Expire(ctx context.Context, id int64) (bool, error) {
	var n int64
	err := a.p.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, a.p.q.expireRequest, a.p.consumer, id)
		n = tag.RowsAffected()
		return err
	})
	if err != nil {
		return false, fmt.Errorf("expire inbox request %d: %w", id, err)
	}
	return n == 1, nil
}

// noLongerParked is the RefusedError of a request about parked event eventID that is not parked any
// more, saying what became of it.
func (p *Processor) noLongerParked(ctx context.Context, eventID string) error {
	var status string
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, p.q.inboxStatus, p.consumer, eventID).Scan(&status)
	})
	why := ""
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		why = "it is not in the inbox: it failed (see `cdc-router inbox list`) or was never received"
	case err != nil:
		return fmt.Errorf("read inbox status of %s: %w", eventID, err)
	case status == "applied":
		why = "it was applied: the missing versions arrived"
	default:
		why = "its status is " + status
	}
	return &RefusedError{Reason: fmt.Sprintf("event %s is no longer parked (%s); nothing skipped", eventID, why)}
}
