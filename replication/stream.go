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

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pubcheck"
	"github.com/cdc-router/cdc-router/quarantine"
)

// errAbandoned ends a stop that could not reach the commit of the open transaction in time; its events are
// published again after the restart (duplicates, never loss).
var errAbandoned = errors.New("stop: the open transaction did not reach its commit in time")

// session is one run of the stream: one replication connection, one publisher, one tracker.
type session struct {
	ctx     context.Context // ends at the stop request
	stop    *stopClock      // the bound of the whole stop
	cfg     Config
	log     *slog.Logger
	conn    *pgconn.PgConn // replication connection, owned by this goroutine only: written through pgconn
	frames  *frames        // and read through frames from START_REPLICATION on
	sql     *pgx.Conn      // ordinary connection: stored position and quarantine
	store   *offsets.Store
	tracker *offsets.Tracker
	pub     Publisher
	dec     *decode.Decoder
	sys     pglogrepl.IdentifySystemResult
	stats   *metrics.Stats

	sent       cdc.LSN   // last position sent in a status update
	sentAt     time.Time // when it was sent
	nextStatus time.Time // when the timer wants the next status update
	cur        offsets.Txn
	inTxn      bool
	lastEnd    cdc.LSN // end of the last commit received
	// lastEventEnd is the end of the last commit received of a transaction with an event or a quarantined
	// row; eventful says whether the open transaction has one.
	lastEventEnd cdc.LSN
	eventful     bool
	stopLogged   bool

	live liveness // finds a server that stopped answering (a status update asks for a reply)
	// resumeAt is the progress inside a transaction a previous run recorded (resumePoint.choose), until the
	// replay of that transaction begins; skip is how many items of the open transaction are still to be
	// passed over, resumed how many were in all; markBroken says the replay had fewer items than its mark
	// (it stops the session, and no mark is kept).
	resumeAt   offsets.Mark
	markConfig string
	skip       int
	resumed    int
	markBroken bool

	// pubCtx bounds a blocked Publish so that status updates go on and a stop is noticed at once; one is
	// shared by every publish until it ends, instead of one timer per event.
	pubCtx    context.Context
	pubCancel context.CancelFunc

	net      *safetyNet           // finds the event the broker keeps refusing; shared by the runs of one Run
	quar     *quarantine.Store    // the quarantine table
	watch    *pubcheck.Watch      // re-checks that the publication still carries the outbox
	emitKeys *emitKeyWatch        // reloads the keys of emitted messages (--message-prefix)
	progress *metrics.ProgressLog // an info line per interval while events flow
	bursts   bursts               // the quarantine records of emitted messages being aggregated

	slot    slotWatch       // reads the slot's health for the metrics and the readiness check
	flight  *metrics.Flight // the events handed to the publisher and not yet confirmed
	pending []pendingTxn    // received transactions with events, not yet acknowledged, in commit order

	// readBy is the read deadline set on the replication connection's socket, shared by consecutive reads
	// (readDeadline); zero when none is set. stopRead interrupts a read at the stop request.
	readBy   time.Time
	stopRead func() bool
}

// stream reads until the stop is requested (then reads on to the end of the open transaction), the
// publisher fails or the connection breaks. It always finishes with a drain and a final status update,
// all within the stop's bound.
func (s *session) stream() error {
	// A read waits with a deadline on the socket, not with a context: pgconn watches a context that can
	// end (an AfterFunc, a channel and a goroutine hand-off per read), and a read per WAL message made that
	// the read loop's largest cost after the read itself. The stop request ends a read through the same
	// deadline.
	s.stopRead = context.AfterFunc(s.ctx, func() { s.conn.Conn().SetReadDeadline(time.Now()) })
	defer func() {
		if s.pubCancel != nil {
			s.pubCancel()
		}
		s.stopRead()
		s.conn.Conn().SetReadDeadline(time.Time{}) // the connection's later users (close) read without one
		s.readBy = time.Time{}
	}()
	for {
		by := s.stop.readBy()
		if !by.IsZero() && !s.stopLogged {
			s.stopLogged = true
			s.log.Info("stop requested: reading on to the end of the open transaction", "in_transaction", s.inTxn)
		}
		if !by.IsZero() && !s.inTxn {
			return s.drain()
		}
		if !by.IsZero() && !time.Now().Before(by) {
			s.drain()
			return errAbandoned
		}
		if err := s.status(false); err != nil {
			return err
		}
		if err := s.watch.Due(s.sql); err != nil {
			return err
		}
		if err := s.bursts.due(s, false); err != nil {
			return err
		}
		s.emitKeys.due(s)
		s.progress.Due()
		select {
		case <-s.pub.Failed():
			return caused(metrics.CauseBroker, fmt.Errorf("publish: %w", s.pub.Err()))
		default:
		}
		if err := s.receive(); err != nil {
			return err
		}
	}
}

// receive reads one message, waiting at most until the next status update is due or the stop request.
func (s *session) receive() error {
	wait := s.cfg.StatusInterval
	if s.tracker.InFlight() > 0 {
		wait = 50 * time.Millisecond // confirms may move the watermark: report it promptly
	}
	if w := s.tracker.Watermark(); w != 0 && w != s.sent { // a move status held back (ackInterval)
		wait = min(wait, max(time.Until(s.sentAt.Add(s.ackInterval())), time.Millisecond))
	}
	stopping := s.ctx.Err() != nil // stopping: read on to the commit
	if err := s.readDeadline(wait); err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	if !stopping && s.ctx.Err() != nil {
		return nil // the stop request came meanwhile (its deadline may predate ours): the loop takes it from here
	}
	f, err := s.frames.next()
	if err != nil {
		if !readTimeout(err) {
			return caused(metrics.CausePostgres, fmt.Errorf("receive: %w", err))
		}
		s.readBy = time.Time{} // the deadline passed, or the stop request moved it: set a new one next time
		if !stopping && s.ctx.Err() != nil {
			return nil // the stop request: the loop takes it from here
		}
		if s.frames.moved { // part of a large message arrived: slow, not silent
			s.frames.moved = false
			s.heard()
			return nil
		}
		return s.quiet()
	}
	s.frames.moved = false
	s.heard()
	return s.frame(f)
}

// readDeadline makes the next read end at most wait from now. It keeps the deadline already set while that
// one is after now and no later than now+wait, so a stream of messages shares one deadline instead of
// setting one per message.
func (s *session) readDeadline(wait time.Duration) error {
	now := time.Now()
	if !s.readBy.IsZero() && s.readBy.After(now) && !s.readBy.After(now.Add(wait)) {
		return nil
	}
	s.readBy = now.Add(wait)
	return s.conn.Conn().SetReadDeadline(s.readBy)
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
		s.stats.SetWALEnd(cdc.LSN(k.ServerWALEnd))
		s.tracker.Keepalive(cdc.LSN(k.ServerWALEnd))
		return s.status(k.ReplyRequested)
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData: %w", err)
		}
		s.net.received = max(s.net.received, cdc.LSN(x.WALStart))
		s.stats.SetWALEnd(cdc.LSN(x.ServerWALEnd))
		err = s.dec.Decode(cdc.LSN(x.WALStart), x.WALData, s)
		if err == nil {
			return nil // drift below would escape to the heap on every message
		}
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
	}
	s.acknowledged(s.sent)
	if err := s.slot.due(s); err != nil {
		return err
	}
	return s.save(false)
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
	if idle {
		return s.store.SaveIdle(ctx, p)
	}
	return s.store.Save(ctx, p, force)
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
	if s.skipped() {
		return nil // confirmed before the restart
	}
	i := s.tracker.Add(x)
	careful := s.net.careful(ev)
	if careful {
		if reason, ok := s.net.condemned(ev.ID); ok {
			return s.quarantineEvent(x, i, ev, metrics.QuarantineRefused, fmt.Sprintf("RabbitMQ refused this event %d times in a row while it was "+
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
	if kind := burstKind(q); kind != "" && !s.inTxn {
		s.bursts.add(s, q, kind, class, -1)
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.quar.Write(ctx, q); err != nil {
		return fmt.Errorf("quarantine row at %s: %w", q.LSN, err)
	}
	s.stats.QuarantinedAs(class)
	s.eventful = true
	s.log.Warn("row quarantined", "lsn", q.LSN, "ordinal", q.Ordinal, "event_id", q.EventID, "table", q.Table, "reason", q.Reason)
	return nil
}
