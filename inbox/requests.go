package inbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Request asks a running Runner of the consumer to settle one failed or parked event with its handler,
// for an operator who has no handler at hand (cdc-router inbox retry|resolve).
type Request struct {
	Action string // "retry" or "resolve"
	Kind   string // "failed" (Target is the record's id) or "parked" (Target is the event id)
	Target string
	Note   string // kept with a resolve (ResolveFailed's note; ResolveParked logs it)
	// FiledBy names who files it, as the operator's tool knows them ("" for none); the PostgreSQL role
	// is recorded either way.
	FiledBy string
	// ExpireAfter, when positive, is how long the request may wait for a Runner: once it has passed
	// without a Runner taking it, none ever does (the filer gave up waiting). Zero: it waits for a
	// Runner until one takes it or it is cancelled.
	ExpireAfter time.Duration
}

// RequestState is where a Request stands.
type RequestState struct {
	Taken bool // a Runner took it
	Done  bool // and carried it out, or refused it
	// State is "waiting" (no Runner took it yet), "taken" (a Runner is carrying it out), "done",
	// "cancelled" (Admin.Cancel: never carried out) or "expired" (ExpireAfter passed, or Admin.Expire:
	// never carried out).
	State string
	// Outcome is the Result's outcome ("applied", "parked", …), "resolved", "refused" (its premise no
	// longer held: nothing was changed) or "error".
	Outcome string
	Error   string // the error, or why it was refused
}

// Request states (RequestState.State).
const (
	RequestWaiting   = "waiting"
	RequestTaken     = "taken"
	RequestDone      = "done"
	RequestCancelled = "cancelled"
	RequestExpired   = "expired"
)

// OutcomeRefused is the outcome of a request a Runner did not carry out because its premise no longer
// held (RequestState.Error says why); nothing was changed.
const OutcomeRefused = "refused"

// Admin is the consumer's repair API without its handler: it lists the failed and parked events and
// files Requests that a running Runner of the same consumer carries out (package inbox/runner, every runner.Config.RequestPoll, through ServeRequest).
type Admin struct{ p *Processor }

// NewAdmin returns the Admin of cfg.Consumer's records in cfg.Schema; it checks the schema as New does.
func NewAdmin(ctx context.Context, db Beginner, cfg Config) (*Admin, error) {
	cfg = cfg.Defaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	p := &Processor{db: db, cfg: cfg, consumer: cfg.Consumer, q: newQueries(cfg.Schema),
		timeouts: timeoutsSQL(cfg.LockTimeout, cfg.StatementTimeout), log: slog.New(slog.DiscardHandler)}
	if err := p.Check(ctx); err != nil {
		return nil, err
	}
	return &Admin{p: p}, nil
}

// FailedEvents is Processor.FailedEvents.
func (a *Admin) FailedEvents(ctx context.Context, limit int) ([]FailedEvent, error) {
	return a.p.FailedEvents(ctx, limit)
}

// ParkedEvents is Processor.ParkedEvents.
func (a *Admin) ParkedEvents(ctx context.Context, limit int) ([]ParkedEvent, error) {
	return a.p.ParkedEvents(ctx, limit)
}

// Request files r once its target exists (ErrFailedNotFound, ErrParkedNotFound otherwise) and returns
// its id. For a parked event it records the aggregate's applied version as the request's premise: a
// Runner refuses the resolve (OutcomeRefused) if missing versions arrived since.
func (a *Admin) Request(ctx context.Context, r Request) (int64, error) {
	if r.Action != "retry" && r.Action != "resolve" {
		return 0, fmt.Errorf("inbox request: action %q is not retry or resolve", r.Action)
	}
	var id int64
	err := a.p.inTx(ctx, func(tx pgx.Tx) error {
		var premise *int64
		switch r.Kind {
		case "failed":
			n, err := strconv.ParseInt(r.Target, 10, 64)
			if err != nil || n <= 0 {
				return fmt.Errorf("%q is not a failed record's id", r.Target)
			}
			if _, err := a.p.failedEventTx(ctx, tx, n, false); err != nil {
				return err
			}
		case "parked":
			pe, err := a.p.parkedEvent(ctx, tx, r.Target)
			if err != nil {
				return err
			}
			premise = &pe.Applied
		default:
			return fmt.Errorf("kind %q is not failed or parked", r.Kind)
		}
		return tx.QueryRow(ctx, a.p.q.request, a.p.consumer, r.Action, r.Kind, r.Target, r.Note, r.FiledBy,
			max(0, r.ExpireAfter.Milliseconds()), premise).Scan(&id)
	})
	if err != nil {
		return 0, fmt.Errorf("inbox request: %w", err)
	}
	return id, nil
}

// State reads where request id stands.
func (a *Admin) State(ctx context.Context, id int64) (RequestState, error) {
	var st RequestState
	err := a.p.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, a.p.q.requestState, a.p.consumer, id).Scan(&st.Taken, &st.Done, &st.State,
			&st.Outcome, &st.Error)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return RequestState{}, fmt.Errorf("read inbox request %d: %w", id, ErrRequestNotFound)
	}
	if err != nil {
		return RequestState{}, fmt.Errorf("read inbox request %d: %w", id, err)
	}
	return st, nil
}

// Await polls request id every poll until it is done, cancelled or expired, or ctx ends, and returns its
// last state.
func (a *Admin) Await(ctx context.Context, id int64, poll time.Duration) (RequestState, error) {
	for {
		st, err := a.State(ctx, id)
		if err != nil || st.Done || st.State == RequestCancelled || st.State == RequestExpired {
			return st, err
		}
		sleep(ctx, poll)
		if ctx.Err() != nil {
			return st, nil
		}
	}
}

// ServeRequest takes one open request of this consumer (filed with Admin.Request) and carries it out
// with the Processor's handler; it reports false when there was none. A Runner calls it every
// RequestPoll; it answers the request even when carrying it out failed (Outcome "error").
func (p *Processor) ServeRequest(ctx context.Context) (bool, error) {
	var t taken
	r := &t.Request
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, p.q.takeRequest, p.consumer).Scan(&t.id, &r.Action, &r.Kind, &r.Target, &r.Note,
			&t.filedAt, &t.premise)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take an inbox request: %w", err)
	}
	id := t.id
	outcome, cerr := p.carryOut(ctx, t)
	detail := ""
	var refused *RefusedError
	switch {
	case errors.As(cerr, &refused):
		outcome, detail = OutcomeRefused, refused.Reason
		p.log.Warn("inbox request refused: its premise no longer holds; nothing was changed", "consumer", p.consumer,
			"request_id", id, "action", r.Action, "kind", r.Kind, "target", r.Target, "reason", detail)
	case cerr != nil:
		outcome, detail = "error", cerr.Error()
		p.log.Info("inbox request carried out", "consumer", p.consumer, "request_id", id, "action", r.Action,
			"kind", r.Kind, "target", r.Target, "outcome", outcome, "error", detail)
	default:
		p.log.Info("inbox request carried out", "consumer", p.consumer, "request_id", id, "action", r.Action,
			"kind", r.Kind, "target", r.Target, "outcome", outcome)
	}
	err = p.inTx(context.WithoutCancel(ctx), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, p.q.answerRequest, p.consumer, id, outcome, detail)
		return err
	})
	if err != nil {
		return true, fmt.Errorf("answer inbox request %d: %w", id, err)
	}
	return true, nil
}

// taken is a request a Runner took, with what it was filed against.
type taken struct {
	Request
	id      int64
	filedAt time.Time
	premise *int64 // the aggregate's applied version when a parked event's request was filed
}

// carryOut settles t's target. A target that is no longer there (the failed record retried or resolved,
// the parked event applied or gone meanwhile) is a RefusedError, as is a resolve whose premise changed.
func (p *Processor) carryOut(ctx context.Context, t taken) (string, error) {
	var res Result
	var err error
	r := t.Request
	switch r.Kind + " " + r.Action {
	case "failed retry", "failed resolve":
		id, perr := strconv.ParseInt(r.Target, 10, 64)
		if perr != nil {
			return "", fmt.Errorf("%q is not a failed record's id", r.Target)
		}
		if r.Action == "resolve" {
			err = p.ResolveFailed(ctx, id, r.Note)
		} else {
			res, err = p.RetryFailed(ctx, id)
		}
		if errors.Is(err, ErrFailedNotFound) {
			return "", &RefusedError{Reason: fmt.Sprintf("failed record %d is no longer open (retried or resolved "+
				"meanwhile); nothing done", id)}
		}
		if err == nil && r.Action == "resolve" {
			return "resolved", nil
		}
	case "parked retry":
		res, err = p.RetryParked(ctx, r.Target)
	case "parked resolve":
		res, err = p.settleParked(ctx, r.Target, settle{skipGap: true, note: r.Note, request: t.id,
			premise: t.premise, filedAt: t.filedAt})
	default:
		return "", fmt.Errorf("unknown request %s %s", r.Action, r.Kind)
	}
	if errors.Is(err, ErrParkedNotFound) {
		return "", p.noLongerParked(ctx, r.Target)
	}
	if err != nil {
		return "", err
	}
	return res.Outcome.String(), nil
}
