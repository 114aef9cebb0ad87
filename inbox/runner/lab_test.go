package runner_test

import (
	"testing"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/internal/inboxlab"
)

// lab is one test's world (inboxlab.Lab); this package's tests add their own helpers to it.
type lab struct{ *inboxlab.Lab }

func newLab(t *testing.T) *lab { t.Helper(); return &lab{inboxlab.New(t, pg)} }

// newBareLab is a lab without the inbox tables.
func newBareLab(t *testing.T) *lab { t.Helper(); return &lab{inboxlab.NewBare(t, pg)} }

func order(aggregateID string, version, delta int64) inbox.Event {
	return inboxlab.Order(aggregateID, version, delta)
}

func fullState(aggregateID string, version, amount int64) inbox.Event {
	return inboxlab.FullState(aggregateID, version, amount)
}

func newID() string { return inboxlab.NewID() }

func want[T comparable](t *testing.T, what string, got, expected T) {
	t.Helper()
	inboxlab.Want(t, what, got, expected)
}
