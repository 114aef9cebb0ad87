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
}

// RequestState is where a Request stands.
type RequestState struct {
	Taken   bool   // a Runner took it
	Done    bool   // and carried it out
	Outcome string // the Result's outcome ("applied", "parked", …), "resolved", or "error"
	Error   string // the error, when Outcome is "error"
}

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
// its id.
func (a *Admin) Request(ctx context.Context, r Request) (int64, error) {
	if r.Action != "retry" && r.Action != "resolve" {
		return 0, fmt.Errorf("inbox request: action %q is not retry or resolve", r.Action)
	}
	var id int64
	err := a.p.inTx(ctx, func(tx pgx.Tx) error {
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
			if _, err := a.p.parkedEvent(ctx, tx, r.Target); err != nil {
				return err
			}
		default:
			return fmt.Errorf("kind %q is not failed or parked", r.Kind)
		}
		return tx.QueryRow(ctx, a.p.q.request, a.p.consumer, r.Action, r.Kind, r.Target, r.Note).Scan(&id)
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
		return tx.QueryRow(ctx, a.p.q.requestState, a.p.consumer, id).Scan(&st.Taken, &st.Done, &st.Outcome, &st.Error)
	})
	if err != nil {
		return RequestState{}, fmt.Errorf("read inbox request %d: %w", id, err)
	}
	return st, nil
}

// Await polls request id every poll until it is done or ctx ends, and returns its last state.
func (a *Admin) Await(ctx context.Context, id int64, poll time.Duration) (RequestState, error) {
	for {
		st, err := a.State(ctx, id)
		if err != nil || st.Done {
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
	var id int64
	var r Request
	err := p.inTx(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, p.q.takeRequest, p.consumer).Scan(&id, &r.Action, &r.Kind, &r.Target, &r.Note)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("take an inbox request: %w", err)
	}
	outcome, cerr := p.carryOut(ctx, r)
	detail := ""
	if cerr != nil {
		outcome, detail = "error", cerr.Error()
	}
	p.log.Info("inbox request carried out", "consumer", p.consumer, "request_id", id, "action", r.Action,
		"kind", r.Kind, "target", r.Target, "outcome", outcome, "error", detail)
	err = p.inTx(context.WithoutCancel(ctx), func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, p.q.answerRequest, p.consumer, id, outcome, detail)
		return err
	})
	if err != nil {
		return true, fmt.Errorf("answer inbox request %d: %w", id, err)
	}
	return true, nil
}

func (p *Processor) carryOut(ctx context.Context, r Request) (string, error) {
	var res Result
	var err error
	switch r.Kind + " " + r.Action {
	case "failed retry", "failed resolve":
		id, perr := strconv.ParseInt(r.Target, 10, 64)
		if perr != nil {
			return "", fmt.Errorf("%q is not a failed record's id", r.Target)
		}
		if r.Action == "resolve" {
			return "resolved", p.ResolveFailed(ctx, id, r.Note)
		}
		res, err = p.RetryFailed(ctx, id)
	case "parked retry":
		res, err = p.RetryParked(ctx, r.Target)
	case "parked resolve":
		res, err = p.ResolveParked(ctx, r.Target, r.Note)
	default:
		return "", fmt.Errorf("unknown request %s %s", r.Action, r.Kind)
	}
	if err != nil {
		return "", err
	}
	return res.Outcome.String(), nil
}
