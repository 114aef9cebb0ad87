package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/quarantine"
)

// errAbandoned ends a stop that could not reach the commit of the open transaction in time; its events are
// published again after the restart (duplicates, never loss).
var errAbandoned = errors.New("stop: the open transaction did not reach its commit in time")

// session is one run of the stream: one replication connection, one publisher, one tracker.
type session struct {
	cfg     Config
	log     *slog.Logger
	conn    *pgconn.PgConn // replication connection, owned by this goroutine only
	sql     *pgx.Conn      // ordinary connection: stored position and quarantine
	store   *offsets.Store
	tracker *offsets.Tracker
	pub     Publisher
	dec     *decode.Decoder
	sys     pglogrepl.IdentifySystemResult
	stats   *Stats

	sent       cdc.LSN   // last position sent in a status update
	nextStatus time.Time // when the timer wants the next status update
	cur        offsets.Txn
	inTxn      bool
	lastEnd    cdc.LSN   // end of the last commit received
	stopBy     time.Time // zero until a stop is requested

	// silence bounds how long the server may send nothing (it sends keepalives every half
	// wal_sender_timeout) before the connection is taken as dead; zero disables the check.
	silence   time.Duration
	lastHeard time.Time

	// pubCtx bounds a blocked Publish so that status updates go on; one is shared by every publish until it
	// expires, instead of one timer per event.
	pubCtx    context.Context
	pubCancel context.CancelFunc

	net   *safetyNet        // finds the event the broker keeps refusing; shared by the runs of one Run
	quar  *quarantine.Store // the quarantine table
	watch *publicationWatch // re-checks that the publication still carries the outbox
}

// stream reads until ctx ends (then reads on to the end of the open transaction), the publisher fails or
// the connection breaks. It always finishes with a drain and a final status update.
func (s *session) stream(ctx context.Context) error {
	defer func() {
		if s.pubCancel != nil {
			s.pubCancel()
		}
	}()
	for {
		if s.stopBy.IsZero() && ctx.Err() != nil {
			s.stopBy = time.Now().Add(s.cfg.ShutdownTimeout)
			s.log.Info("stop requested: reading on to the end of the open transaction", "in_transaction", s.inTxn)
		}
		if !s.stopBy.IsZero() && !s.inTxn {
			return s.drain()
		}
		if !s.stopBy.IsZero() && time.Now().After(s.stopBy) {
			s.drain()
			return errAbandoned
		}
		if err := s.status(false); err != nil {
			return err
		}
		if err := s.watch.due(s); err != nil {
			return err
		}
		select {
		case <-s.pub.Failed():
			return fmt.Errorf("publish: %w", s.pub.Err())
		default:
		}
		if err := s.receive(); err != nil {
			return err
		}
	}
}

// receive reads one message, waiting at most until the next status update is due.
func (s *session) receive() error {
	wait := s.cfg.StatusInterval
	if s.tracker.InFlight() > 0 {
		wait = 50 * time.Millisecond // confirms may move the watermark: report it promptly
	}
	rctx, cancel := context.WithTimeout(context.Background(), wait)
	msg, err := s.conn.ReceiveMessage(rctx)
	cancel()
	if err != nil {
		if !pgconn.Timeout(err) {
			return fmt.Errorf("receive: %w", err)
		}
		if s.silence > 0 && time.Since(s.lastHeard) > s.silence {
			return fmt.Errorf("receive: PostgreSQL sent nothing, not even a keepalive, for %v: taking the connection as dead", s.silence)
		}
		return nil
	}
	s.lastHeard = time.Now()
	switch m := msg.(type) {
	case *pgproto3.CopyData:
		return s.copyData(m.Data)
	case *pgproto3.ErrorResponse:
		return streamError(pgconn.ErrorResponseToPgError(m), s.cfg)
	default:
		return fmt.Errorf("unexpected message %T on the replication connection", msg)
	}
}

func (s *session) copyData(data []byte) error {
	if len(data) == 0 {
		return errors.New("empty CopyData message")
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive: %w", err)
		}
		s.tracker.Keepalive(cdc.LSN(k.ServerWALEnd))
		return s.status(k.ReplyRequested)
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		s.net.received = max(s.net.received, cdc.LSN(x.WALStart))
		err = s.dec.Decode(cdc.LSN(x.WALStart), x.WALData, s)
		var drift *decode.DriftError
		if errors.As(err, &drift) {
			// Nothing of the affected transaction is acknowledged: the slot stays before the first affected row.
			s.drain()
			return &Fatal{Msg: drift.Error()}
		}
		return err
	default:
		return nil
	}
}

// status sends a standby status update when forced, when the watermark moved or when the timer is due,
// and stores the position (batched by the store).
func (s *session) status(force bool) error {
	w := s.tracker.Watermark()
	if w == 0 {
		return nil
	}
	now := time.Now()
	if force || w != s.sent || !now.Before(s.nextStatus) {
		err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn,
			pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(w)})
		if err != nil {
			return fmt.Errorf("send standby status update: %w", err)
		}
		if w != s.sent {
			s.log.Debug("acknowledged", "lsn", w)
			s.stats.acked.Store(uint64(w))
		}
		s.sent, s.nextStatus = w, now.Add(s.cfg.StatusInterval)
	}
	return s.save(false)
}

func (s *session) save(force bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.store.Save(ctx, offsets.Position{LSN: s.tracker.Watermark(), SystemID: s.sys.SystemID,
		Timeline: s.sys.Timeline}, force)
}

// drain stops reading, waits (bounded) until every committed transaction is confirmed, and sends and
// stores the final position.
func (s *session) drain() error {
	deadline := time.Now().Add(s.cfg.ShutdownTimeout)
	if !s.stopBy.IsZero() && s.stopBy.Before(deadline) {
		deadline = s.stopBy // one bound for the whole stop: reading to the commit and draining
	}
	for s.tracker.Watermark() < s.lastEnd && time.Now().Before(deadline) {
		select {
		case <-s.tracker.Advanced():
		case <-s.pub.Failed():
			deadline = time.Now()
		case <-time.After(s.cfg.StatusInterval):
		}
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

// Begin implements decode.Handler.
func (s *session) Begin(commitLSN cdc.LSN) error {
	s.cur, s.inTxn = s.tracker.Begin(), true
	return nil
}

// Event implements decode.Handler: it publishes ev, keeping the status updates going while the window is
// full. An event the broker can never accept is quarantined instead. While the safety net replays the
// events around a per-message refusal, ev is published alone and confirmed before the next one.
func (s *session) Event(ev cdc.Event) error {
	x := s.cur
	s.tracker.Add(x)
	careful := s.net.careful(ev)
	if careful {
		if reason, ok := s.net.condemned(ev.ID); ok {
			return s.quarantineEvent(x, ev, fmt.Sprintf("RabbitMQ refused this event %d times in a row while it was "+
				"the only message in flight: %s", strikesToQuarantine, reason))
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
			s.pubCtx, s.pubCancel = context.WithTimeout(context.Background(), s.cfg.StatusInterval)
		}
		err := s.pub.Publish(s.pubCtx, ev, func() { s.tracker.Confirm(x); s.stats.published.Add(1) })
		if err == nil {
			s.log.Debug("published", "event_id", ev.ID, "lsn", ev.CommitLSN)
			break
		}
		if errors.Is(err, cdc.ErrUnpublishable) {
			return s.quarantineEvent(x, ev, err.Error())
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("publish: %w", err)
		}
		if err := s.waited(); err != nil {
			return err
		}
	}
	if !careful {
		return nil
	}
	s.net.alone = ev.ID
	if err := s.settle(); err != nil {
		return err
	}
	s.net.alone = ""
	s.net.cleared(ev.ID)
	return nil
}

// settle waits until every published event is confirmed, keeping the status updates going; it returns the
// publisher's error if it fails first.
func (s *session) settle() error {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), s.cfg.StatusInterval)
		err := s.pub.Drain(ctx)
		cancel()
		if err == nil {
			return nil
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("publish: %w", err)
		}
		if err := s.waited(); err != nil {
			return err
		}
	}
}

// waited runs between two bounded waits on the publisher: it ends a stop whose deadline passed and sends
// the status update that is due.
func (s *session) waited() error {
	if !s.stopBy.IsZero() && time.Now().After(s.stopBy) {
		s.drain()
		return errAbandoned
	}
	return s.status(false)
}

// quarantineEvent stores an event the broker refuses and resolves it, so the stream goes on past it.
func (s *session) quarantineEvent(x offsets.Txn, ev cdc.Event, reason string) error {
	if err := s.Quarantine(quarantine.FromEvent(ev, s.cfg.Table, reason)); err != nil {
		return err
	}
	s.tracker.Confirm(x)
	return nil
}

// Quarantine implements decode.Handler: the row is stored with its bounded raw values, counted and logged
// (without the values), and the stream goes on.
func (s *session) Quarantine(q cdc.Quarantined) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.quar.Write(ctx, q); err != nil {
		return fmt.Errorf("quarantine row at %s: %w", q.LSN, err)
	}
	s.stats.quarantined.Add(1)
	s.log.Warn("row quarantined", "lsn", q.LSN, "ordinal", q.Ordinal, "event_id", q.EventID, "table", q.Table, "reason", q.Reason)
	return nil
}

// Commit implements decode.Handler.
func (s *session) Commit(commitLSN, endLSN cdc.LSN) error {
	s.tracker.Commit(s.cur, endLSN)
	s.inTxn, s.lastEnd = false, endLSN
	return nil
}

// streamError classifies an error the server sent inside the stream.
func streamError(err *pgconn.PgError, cfg Config) error {
	switch err.Code {
	case "55000":
		return fatalf("PostgreSQL can no longer stream from slot %s (%s): run `cdc-router reset --slot %s` and "+
			"`cdc-router run` to re-snapshot", cfg.Slot, err.Message, cfg.Slot)
	case "42704":
		return fatalf("PostgreSQL says %s: run `cdc-router migrate` or fix --publication / --slot", err.Message)
	}
	return fmt.Errorf("replication stream: %w", err)
}
