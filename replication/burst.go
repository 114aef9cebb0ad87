package replication

import (
	"fmt"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/quarantine"
)

// hold is what one message of a burst keeps unresolved in the tracker until the burst's record is written:
// item i of its transaction x, or (item < 0) the transaction of its own of a non-transactional message.
type hold struct {
	x    offsets.Txn
	item int
}

// bursts are a session's open bursts (quarantine.Bursts: the records of messages anyone can emit,
// aggregated per reason and per second). Every message in one holds the acknowledged position (an
// outstanding event of its transaction in the tracker, or of a transaction of its own for a
// non-transactional one) until the burst's record is written.
type bursts struct{ quarantine.Bursts[hold] }

// add puts q, of kind, in its kind's open burst and holds the acknowledged position for it: inside a
// transaction item i of it (as the tracker's Add returned it, so that the progress inside the transaction
// counts the message once), outside one (i < 0) a transaction of its own.
func (b *bursts) add(s *session, q cdc.Quarantined, kind, class string, i int) {
	h := hold{x: s.cur, item: i}
	if i < 0 {
		h.x = s.tracker.Begin()
		s.tracker.Add(h.x)
		s.tracker.Commit(h.x, q.LSN)
	}
	b.Add(q, kind, h)
	s.stats.QuarantinedAs(class)
	s.eventful = true
}

// due writes the records of the bursts whose window has passed, or of every burst when all is set, and
// releases the positions they held.
func (b *bursts) due(s *session, all bool) error {
	for {
		o, ok := b.Next(all)
		if !ok {
			return nil
		}
		q := o.Record
		ctx, end := s.onPostgres("write a quarantine record", 30*time.Second)
		err := s.quar.Write(ctx, q)
		end()
		if err != nil {
			return fmt.Errorf("quarantine messages at %s: %w", q.LSN, err)
		}
		b.Written()
		for _, h := range o.Holds {
			if h.item < 0 {
				s.tracker.Confirm(h.x)
			} else {
				s.tracker.ConfirmItem(h.x, h.item)
			}
		}
		s.log.Warn("messages quarantined", "lsn", q.LSN, "last_lsn", o.Last, "count", o.Count, "table", q.Table, "reason", o.Kind)
	}
}

// flushBursts writes the records of the bursts still open when a session ends without its drain (a failed
// broker, a cut): the messages they stand for are then resolved, so the progress kept inside their
// transaction can pass them. A record that cannot be written leaves them unresolved: they are read again.
func (s *session) flushBursts() {
	if s.bursts.Open() == 0 {
		return
	}
	if err := s.bursts.due(s, true); err != nil {
		s.log.Warn("could not write the quarantine record of a burst of messages: they are read again at the next start",
			"error", err)
	}
}
