package replication

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// States of the router, as Stats reports them.
const (
	StateStarting  = "starting"  // checking the setup and connecting
	StateSnapshot  = "snapshot"  // copying the rows already in the table; the slot is not streamed yet
	StateStreaming = "streaming" // reading the slot
	// StateStandby: another router holds the slot (its advisory lock, or its walsender at START_REPLICATION);
	// this one tries again every second and takes over when the slot is free. Not a restart.
	StateStandby    = "standby"
	StateRestarting = "restarting" // waiting to restart the stream after a failure
	StateStopped    = "stopped"
)

// Stats is what the router did since the process started, safe for concurrent readers (health and
// metrics endpoints).
type Stats struct {
	published   atomic.Int64
	quarantined atomic.Int64
	restarts    atomic.Int64
	acked       atomic.Uint64
	snapDone    atomic.Int64
	snapTotal   atomic.Int64

	mu      sync.Mutex
	state   string
	since   time.Time
	lastErr string
	problem string // a condition that makes the router unready while it runs, e.g. the publication lost the outbox
}

// Problem is what makes a running router unready although it streams (empty when nothing does): the
// publication no longer carries the outbox table's inserts, so new rows are not streamed.
func (s *Stats) Problem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.problem
}

func (s *Stats) setProblem(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problem = p
}

// Published is the number of streamed events confirmed by the broker.
func (s *Stats) Published() int64 { return s.published.Load() }

// Quarantined is the number of streamed rows and refused events written to the quarantine table.
func (s *Stats) Quarantined() int64 { return s.quarantined.Load() }

// Restarts is the number of in-process stream restarts after a failure.
func (s *Stats) Restarts() int64 { return s.restarts.Load() }

// Acknowledged is the last position acknowledged to PostgreSQL.
func (s *Stats) Acknowledged() cdc.LSN { return cdc.LSN(s.acked.Load()) }

// Snapshot is the progress of the initial snapshot this process ran or runs (zero when none).
func (s *Stats) Snapshot() (done, total int64) { return s.snapDone.Load(), s.snapTotal.Load() }

// State is the current state, since when, and the error that caused the last restart.
func (s *Stats) State() (state string, since time.Time, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.since, s.lastErr
}

func (s *Stats) setState(state string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != state {
		s.state, s.since = state, time.Now()
	}
	if err != nil {
		s.lastErr = err.Error()
	}
}

func (s *Stats) snapshotProgress(done, total int64) {
	s.snapDone.Store(done)
	s.snapTotal.Store(total)
}
