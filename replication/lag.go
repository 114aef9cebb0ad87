package replication

import (
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// pendingTxn is a received transaction with events that is not acknowledged yet: the replication lag in
// time is the age of the oldest one's commit.
type pendingTxn struct {
	end       cdc.LSN // its end LSN; zero while it is open
	committed time.Time
}

// acknowledged drops the pending transactions that the acknowledged position w covers and records the
// commit time of the oldest one left (none: zero lag).
func (s *session) acknowledged(w cdc.LSN) {
	n := 0
	for n < len(s.pending) && s.pending[n].end != 0 && s.pending[n].end <= w {
		n++
	}
	if n == 0 && len(s.pending) > 0 {
		return
	}
	s.pending = append(s.pending[:0], s.pending[n:]...)
	if len(s.pending) == 0 {
		s.stats.SetOldestPending(time.Time{})
		return
	}
	s.stats.SetOldestPending(s.pending[0].committed)
}

// oldestCommit is the commit time of the oldest of pending, zero when there is none: what a session hands
// to the next (metrics.Stats.Carry).
func oldestCommit(pending []pendingTxn) time.Time {
	if len(pending) == 0 {
		return time.Time{}
	}
	return pending[0].committed
}

// carried is the pending list a session starts with: the previous session's oldest unacknowledged
// transaction as an open entry (committed not zero), which the commit of its replay closes; else none.
func carried(committed time.Time) []pendingTxn {
	if committed.IsZero() {
		return nil
	}
	return []pendingTxn{{committed: committed}}
}
