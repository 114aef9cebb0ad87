package replication

import (
	"fmt"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/quarantine"
)

// The decode.Handler methods of a session other than Event (stream.go): the transaction's bounds, and the
// rows the decoder quarantines. Each event or quarantined row inside a transaction is one of its items,
// counted in stream order for the progress inside the transaction (resume.go).

// Begin implements decode.Handler.
func (s *session) Begin(commitLSN cdc.LSN) error {
	s.cur, s.inTxn, s.eventful = s.beginResumed(commitLSN), true, false
	return nil
}

// Quarantine implements decode.Handler: the row is stored with its bounded raw values, counted and logged
// (without the values), and the stream goes on. Inside a transaction it is one of its items, resolved once
// stored.
func (s *session) Quarantine(q cdc.Quarantined) error {
	if !s.inTxn {
		return s.quarantine(q, metrics.QuarantineRow) // a non-transactional message: no transaction to count it in
	}
	s.eventful = true
	if s.skipped("", "") {
		return nil // stored before the restart
	}
	i := s.tracker.Add(s.cur)
	if kind := quarantine.BurstKind(q); kind != "" { // one item, resolved when its burst's record is written
		s.bursts.add(s, q, kind, metrics.QuarantineRow, i)
		return nil
	}
	if err := s.quarantine(q, metrics.QuarantineRow); err != nil {
		return err
	}
	s.tracker.ConfirmItem(s.cur, i)
	return nil
}

// Commit implements decode.Handler.
func (s *session) Commit(commitLSN, endLSN cdc.LSN) error {
	if s.skip > 0 {
		// The replay has fewer items than the mark it resumed past said were confirmed: the items passed
		// over may not be the ones confirmed. Nothing of it is acknowledged; the next run publishes it whole.
		s.markBroken = true
		return fmt.Errorf("the replay of transaction %s (xid %d) has %d items fewer than the progress recorded for it: "+
			"publishing it again whole", commitLSN, s.dec.Xid(), s.skip)
	}
	if s.resumed > 0 {
		s.log.Info("resumed transaction complete", "commit_lsn", commitLSN, "skipped", s.resumed)
		s.resumed = 0
	}
	s.tracker.Commit(s.cur, endLSN)
	s.inTxn, s.lastEnd = false, endLSN
	if n := len(s.pending); n > 0 && s.pending[n-1].end == 0 {
		s.pending[n-1].end = endLSN
	}
	if s.eventful {
		s.lastEventEnd = endLSN
	}
	return nil
}
