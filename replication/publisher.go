package replication

import (
	"context"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Publisher takes events to the broker. route.Router satisfies it.
type Publisher interface {
	// Publish hands ev over; it blocks while the publish window is full and returns ctx's error if ctx ends
	// first. done is called once, only after the broker confirmed ev positively and did not return it. An
	// error wrapping cdc.ErrUnpublishable means the broker can never accept ev; the publisher goes on.
	Publish(ctx context.Context, ev cdc.Event, done func()) error
	// Failed is closed once the publisher has failed (a nack, a return, a lost channel); Err says why.
	Failed() <-chan struct{}
	Err() error
	// Drain waits until every published event is confirmed; it returns the publisher's error if it fails
	// first, and ctx's error if ctx ends first.
	Drain(ctx context.Context) error
	// Close stops the publisher; events not confirmed by then are never confirmed.
	Close() error
}

// Dialer connects a new Publisher; the stream dials one per run.
type Dialer func(ctx context.Context) (Publisher, error)
