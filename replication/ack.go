package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
)

// ackInterval is the shortest time between two status updates that only report a moved watermark. A
// watermark moves with almost every confirm at moderate rates; reporting each move cost a write, and a
// wake-up and a slot update in the walsender, per event. The acknowledged position is the same, only
// reported up to this much later; a keepalive that asks for a reply and the stop are answered at once.
const ackInterval = 10 * time.Millisecond

func (s *session) ackInterval() time.Duration { return min(ackInterval, s.cfg.StatusInterval) }

// statusDue says whether a status update goes out now: when forced (a keepalive asks for a reply, or the
// stop), when the timer is due (timer), or when the watermark w moved from the last position sent and
// ackInterval has passed since that was sent (moveBy).
func statusDue(force bool, w, sent cdc.LSN, now, moveBy, timer time.Time) bool {
	return force || !now.Before(timer) || w != sent && !now.Before(moveBy)
}

// status sends a standby status update when forced, when the watermark moved (at most once per
// ackInterval) or when the timer is due, and stores the position (batched by the store).
func (s *session) status(force bool) error {
	w := s.tracker.Watermark()
	if w == 0 {
		return nil
	}
	now := time.Now()
	if statusDue(force, w, s.sent, now, s.sentAt.Add(s.ackInterval()), s.nextStatus) {
		if err := s.sendStatus(w, now); err != nil {
			return err
		}
	}
	s.acknowledged(s.sent)
	if err := s.slot.due(s); err != nil {
		return err
	}
	return s.save(false)
}

// sendStatus sends a standby status update acknowledging w, sent at now.
func (s *session) sendStatus(w cdc.LSN, now time.Time) error {
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn,
		pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(w)})
	if err != nil {
		return fmt.Errorf("send standby status update: %w", err)
	}
	if w != s.sent {
		s.log.Debug("acknowledged", "lsn", w)
		s.stats.SetAcknowledged(w)
	}
	s.sent, s.sentAt, s.nextStatus = w, now, now.Add(s.cfg.StatusInterval)
	s.cfg.Fence.sent(now)
	return nil
}

func (s *session) save(force bool) error {
	p := offsets.Position{LSN: s.tracker.Watermark(), SystemID: s.sys.SystemID, Timeline: s.sys.Timeline,
		Mark: s.mark(), MarkConfig: s.markConfig}
	// No transaction with an event ended since the last write: the advance is the keepalives' (or, before
	// PostgreSQL 15, empty transactions') alone, and on an idle database that WAL is mostly the router's
	// own last write.
	idle := !force && s.lastEventEnd <= s.store.Saved()
	if !s.store.Due(p, force, idle) {
		return nil // called at every message: most calls write nothing, and need no context
	}
	end := s.stop.end()
	if end.IsZero() {
		end = time.Now().Add(s.bounded(10 * time.Second))
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	s.stats.WaitOnPostgres("store the position", time.Now())
	defer s.stats.WaitOnPostgres("", time.Time{})
	if idle {
		return s.store.SaveIdle(ctx, p)
	}
	return s.store.Save(ctx, p, force)
}

// ackConfirmed acknowledges, when a session fails for another cause than PostgreSQL, what the broker confirmed
// before the failure: the tracker's watermark goes to the slot and to the stored position at once. Status
// updates are batched (ackInterval, the store's interval), and the next session starts from what was
// acknowledged, with a mark only for progress inside the oldest unacknowledged transaction. Without this, a
// refusal that comes right after a long transaction was confirmed (each retry publishes one event at a
// time, so the refused event is published just after the transaction's last confirm) sent every retry back
// before that transaction, whose mark was gone with its completion: seed 9405 of the harness republished a
// 20,514-event transaction, one event at a time, at each of its refusal retries, 40 s each, and held the
// events after it for minutes. A failure here is left to the next session, which then starts where it
// would have without it. Bounded by --pg-timeout (10 s at most).
func (s *session) ackConfirmed() {
	w := s.tracker.Watermark()
	if w == 0 || w <= s.sent {
		return
	}
	conn := s.conn.Conn()
	conn.SetWriteDeadline(time.Now().Add(s.bounded(10 * time.Second)))
	defer conn.SetWriteDeadline(time.Time{})
	if err := s.sendStatus(w, time.Now()); err != nil {
		s.log.Debug("acknowledge the confirmed position after the failure", "lsn", w, "error", err)
		return
	}
	s.acknowledged(w)
	if err := s.save(true); err != nil {
		s.log.Debug("store the confirmed position after the failure", "lsn", w, "error", err)
	}
}

// drain stops reading, waits (bounded by the stop, or by the shutdown timeout when no stop was requested)
// until every committed transaction is confirmed, and sends and stores the final position.
func (s *session) drain() error {
	if err := s.bursts.due(s, true); err != nil {
		return err
	}
	deadline := s.stop.readBy()
	if deadline.IsZero() {
		deadline = time.Now().Add(s.cfg.ShutdownTimeout)
	}
	for s.tracker.Watermark() < s.lastEnd && time.Now().Before(deadline) {
		t := time.NewTimer(min(s.cfg.StatusInterval, time.Until(deadline)))
		select {
		case <-s.tracker.Advanced():
		case <-s.pub.Failed():
			deadline = time.Now()
		case <-t.C:
		}
		t.Stop()
		if err := s.status(false); err != nil {
			return err
		}
	}
	if err := s.status(true); err != nil {
		return err
	}
	if err := s.save(true); err != nil {
		return err
	}
	w := s.tracker.Watermark()
	if w < s.lastEnd {
		s.log.Warn("stopped with unconfirmed events: they are published again at the next start",
			"lsn", w, "received_lsn", s.lastEnd)
	} else {
		s.log.Info("drained: every received event is confirmed and acknowledged", "lsn", w)
	}
	return nil
}
