package replication

import (
	"fmt"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
)

// burstWindow is how long the quarantine records of one kind of burst are aggregated into one.
const burstWindow = time.Second

// burstReasons start the reasons of the quarantined messages that any role able to log in can emit, as
// many as it likes: non-transactional messages with the prefix, and emitted messages that fail
// authentication. Their records are aggregated per reason and per burstWindow: one record, the first
// message's, with the number of messages, their bytes and their last LSN in the reason, so that a flood
// costs one INSERT per second instead of one per message.
var burstReasons = []string{
	decode.NonTransactionalReason[:strings.Index(decode.NonTransactionalReason, " (")],
	"unauthenticated emitted message",
}

// burstKind is the reason under which q is aggregated, "" for a record written on its own: its reason up
// to the first digit, so that each distinct refusal (no MAC, a forged MAC, an unknown key, ...) keeps a
// record of its own while numbers a sender chooses (a key id) cannot open a burst per message.
func burstKind(q cdc.Quarantined) string {
	if !strings.HasPrefix(q.Table, decode.MessageTable) {
		return ""
	}
	reason := strings.TrimPrefix(q.Reason, "message: ") // the decoder's prefix for an envelope it refuses
	for _, r := range burstReasons {
		if strings.HasPrefix(reason, r) {
			if i := strings.IndexAny(reason, "0123456789"); i >= 0 {
				reason = reason[:i]
			}
			return reason
		}
	}
	return ""
}

// burst is the record of the messages of one kind received in one window, not written yet. Every message
// in it holds the acknowledged position (an outstanding event of its transaction in the tracker, or of a
// transaction of its own for a non-transactional one) until the record is written.
type burst struct {
	kind  string
	first cdc.Quarantined
	count int
	bytes int64
	last  cdc.LSN
	began time.Time
	holds []hold
}

// hold is what one message of a burst keeps unresolved in the tracker until the burst's record is written:
// item i of its transaction x, or (item < 0) the transaction of its own of a non-transactional message.
type hold struct {
	x    offsets.Txn
	item int
}

// bursts are a session's open bursts, at most one per kind.
type bursts struct{ open []*burst }

// add puts q, of kind, in its kind's open burst (opening one) and holds the acknowledged position for it:
// inside a transaction item i of it (as the tracker's Add returned it, so that the progress inside the
// transaction counts the message once), outside one (i < 0) a transaction of its own.
func (b *bursts) add(s *session, q cdc.Quarantined, kind, class string, i int) {
	var cur *burst
	for _, o := range b.open {
		if o.kind == kind {
			cur = o
		}
	}
	if cur == nil {
		cur = &burst{kind: kind, first: q, began: time.Now()}
		b.open = append(b.open, cur)
	}
	cur.count++
	cur.last = q.LSN
	for _, v := range q.Columns {
		cur.bytes += v.Size
	}
	h := hold{x: s.cur, item: i}
	if i < 0 {
		h.x = s.tracker.Begin()
		s.tracker.Add(h.x)
		s.tracker.Commit(h.x, q.LSN)
	}
	cur.holds = append(cur.holds, h)
	s.stats.QuarantinedAs(class)
	s.eventful = true
}

// due writes the records of the bursts whose window has passed, or of every burst when all is set.
func (b *bursts) due(s *session, all bool) error {
	for len(b.open) > 0 && (all || time.Since(b.open[0].began) >= burstWindow) {
		if err := b.open[0].write(s); err != nil {
			return err
		}
		b.open = b.open[1:]
	}
	return nil
}

// write stores the burst's record and releases the position it held.
func (o *burst) write(s *session) error {
	q := o.first
	if o.count > 1 {
		q.Reason = fmt.Sprintf("%s (one record for %d such messages in %v, up to LSN %s, %d bytes of content in all; "+
			"only the first is stored)", q.Reason, o.count, time.Since(o.began).Round(time.Millisecond), o.last, o.bytes)
	}
	ctx, cancel := s.stop.bounded(30 * time.Second)
	defer cancel()
	if err := s.quar.Write(ctx, q); err != nil {
		return fmt.Errorf("quarantine messages at %s: %w", q.LSN, err)
	}
	for _, h := range o.holds {
		if h.item < 0 {
			s.tracker.Confirm(h.x)
		} else {
			s.tracker.ConfirmItem(h.x, h.item)
		}
	}
	s.log.Warn("messages quarantined", "lsn", q.LSN, "last_lsn", o.last, "count", o.count, "table", q.Table, "reason", o.kind)
	return nil
}

// flushBursts writes the records of the bursts still open when a session ends without its drain (a failed
// broker, a cut): the messages they stand for are then resolved, so the progress kept inside their
// transaction can pass them. A record that cannot be written leaves them unresolved: they are read again.
func (s *session) flushBursts() {
	if len(s.bursts.open) == 0 {
		return
	}
	if err := s.bursts.due(s, true); err != nil {
		s.log.Warn("could not write the quarantine record of a burst of messages: they are read again at the next start",
			"error", err)
	}
}
