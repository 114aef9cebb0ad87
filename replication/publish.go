package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/quarantine"
)

// Event implements decode.Handler: it publishes ev, keeping the status updates going while the window is
// full. An event the broker can never accept is quarantined instead. While the safety net replays the
// events around a per-message refusal, ev is published alone and confirmed before the next one.
func (s *session) Event(ev cdc.Event) error {
	x := s.cur
	if n := len(s.pending); n == 0 || s.pending[n-1].end != 0 { // the transaction's first event
		s.pending = append(s.pending, pendingTxn{committed: s.dec.CommitTime()})
		if len(s.pending) == 1 {
			s.stats.SetOldestPending(s.pending[0].committed)
		}
	}
	s.eventful = true
	if s.skipped(ev.AggregateType, ev.AggregateID) {
		return nil // confirmed before the restart
	}
	i := s.tracker.Add(x)
	careful := s.net.careful(ev)
	if careful {
		if reason, ok := s.net.condemned(ev); ok {
			if err := s.quarantineEvent(x, i, ev, metrics.QuarantineRefused, fmt.Sprintf("RabbitMQ refused this event %d times in a row while it "+
				"was the only message in flight: %s", strikesToQuarantine, reason)); err != nil {
				return err
			}
			return s.forgive(ev)
		}
		if err := s.settle(); err != nil {
			return err
		}
	}
	for {
		if s.pubCtx == nil || s.pubCtx.Err() != nil {
			if s.pubCancel != nil {
				s.pubCancel()
			}
			s.pubCtx, s.pubCancel = s.boundedWait()
		}
		committed, seq := s.dec.CommitTime(), s.flight.Add(time.Now())
		err := s.pub.Publish(s.pubCtx, ev, func() { s.tracker.ConfirmItem(x, i); s.stats.Confirmed(committed); s.flight.Done(seq) })
		if err != nil {
			s.flight.Done(seq)
		}
		if err == nil {
			if s.log.Enabled(context.Background(), slog.LevelDebug) { // the arguments cost allocations per event
				s.log.Debug("published", "event_id", ev.ID, "lsn", ev.CommitLSN)
			}
			break
		}
		if errors.Is(err, cdc.ErrUnpublishable) {
			return s.quarantineEvent(x, i, ev, metrics.QuarantineUnpublishable, err.Error())
		}
		if !waitEnded(err) {
			return caused(metrics.CauseBroker, fmt.Errorf("publish: %w", err))
		}
		if err := s.waited(); err != nil {
			return err
		}
	}
	if !careful {
		return nil
	}
	s.net.alone = offsets.Refused(ev)
	if err := s.settle(); err != nil {
		return err
	}
	s.net.alone = offsets.RefusedEvent{}
	return s.forgive(ev)
}

// settle waits until every published event is confirmed, keeping the status updates going; it returns the
// publisher's error if it fails first.
func (s *session) settle() error {
	for {
		ctx, cancel := s.boundedWait()
		err := s.pub.Drain(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if !waitEnded(err) {
			return caused(metrics.CauseBroker, fmt.Errorf("publish: %w", err))
		}
		if err := s.waited(); err != nil {
			return err
		}
	}
}

// boundedWait is the context of one wait on the publisher: it ends after a status interval, at the stop
// request, and at the stop's reading deadline, so that neither a full window nor missing confirms (a
// stalled connection, a broker alarm) hold up the status updates or the stop.
func (s *session) boundedWait() (context.Context, context.CancelFunc) {
	if by := s.stop.readBy(); !by.IsZero() {
		if next := time.Now().Add(s.cfg.StatusInterval); next.Before(by) {
			by = next
		}
		return context.WithDeadline(context.Background(), by)
	}
	return context.WithTimeout(s.ctx, s.cfg.StatusInterval)
}

// waitEnded reports whether err only says that a boundedWait ended.
func waitEnded(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// waited runs between two bounded waits on the publisher: it ends a stop whose deadline passed and sends
// the status update that is due.
func (s *session) waited() error {
	if by := s.stop.readBy(); !by.IsZero() && !time.Now().Before(by) {
		s.drain()
		return errAbandoned
	}
	s.progress.Due() // a stalled broker is when the progress line matters
	return s.status(false)
}

// quarantineEvent stores an event the broker refuses and resolves it (item i of transaction x), so the
// stream goes on past it.
func (s *session) quarantineEvent(x offsets.Txn, i int, ev cdc.Event, class, reason string) error {
	if err := s.quarantine(quarantine.FromEvent(ev, s.cfg.Table, reason), class); err != nil {
		return err
	}
	s.tracker.ConfirmItem(x, i)
	return nil
}

// quarantine stores q and counts it under its reason class; a message anyone can emit outside a transaction
// goes into its burst's record (burst.go; inside one, Quarantine puts it there as an item of its transaction).
func (s *session) quarantine(q cdc.Quarantined, class string) error {
	if kind := quarantine.BurstKind(q); kind != "" && !s.inTxn {
		s.bursts.add(s, q, kind, class, -1)
		return nil
	}
	ctx, end := s.onPostgres("write a quarantine record", 30*time.Second)
	defer end()
	if err := s.quar.Write(ctx, q); err != nil {
		return fmt.Errorf("quarantine row at %s: %w", q.LSN, err)
	}
	s.stats.QuarantinedAs(class)
	s.eventful = true
	s.log.Warn("row quarantined", "lsn", q.LSN, "ordinal", q.Ordinal, "event_id", q.EventID, "table", q.Table, "reason", q.Reason)
	return nil
}
