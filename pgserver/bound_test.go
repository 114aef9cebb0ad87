package pgserver

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestSetupStepBoundsAStepThatDoesNotAnswer: a step that waits on a server that does not answer ends at the
// bound as a *Retryable naming the server and the bound; a refusal found meanwhile, and a step of a run that
// was stopped, are returned as they are.
func TestSetupStepBoundsAStepThatDoesNotAnswer(t *testing.T) {
	wait := func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
	began := time.Now()
	err := SetupStep(context.Background(), 50*time.Millisecond, "db:5432", wait)
	var r *Retryable
	if !errors.As(err, &r) || !strings.Contains(err.Error(), "PostgreSQL at db:5432 did not answer") ||
		!strings.Contains(err.Error(), "within 50ms") || time.Since(began) > time.Second {
		t.Errorf("a step that does not answer: %v after %v", err, time.Since(began))
	}
	refusal := cdc.Fatalf("refused")
	if err := SetupStep(context.Background(), 50*time.Millisecond, "db:5432", func(ctx context.Context) error {
		<-ctx.Done()
		return refusal
	}); err != refusal {
		t.Errorf("a refusal at the bound: %v, want it as it is", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := SetupStep(ctx, time.Second, "db:5432", wait); !errors.Is(err, context.Canceled) || errors.As(err, &r) {
		t.Errorf("a stopped run: %v, want its context's error", err)
	}
	if err := Stalled(context.DeadlineExceeded, "db:5432"); !errors.As(err, &r) || !strings.Contains(err.Error(), "PostgreSQL at db:5432 stopped answering") {
		t.Errorf("a timeout in the stream: %v", err)
	}
}
