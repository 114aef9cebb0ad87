package replication

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/copyboth"
	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// publicationDue runs the publication check when it is due, bounded as the stream's other queries are. It
// runs at every turn of the stream's loop: until the check is due it builds no context (a timer and an
// AfterFunc on the stop's context per WAL message were the loop's largest cost after the read itself).
func (s *session) publicationDue() error {
	if time.Now().Before(s.watch.Next()) {
		return nil
	}
	ctx, end := s.onPostgres("check the publication", 10*time.Second)
	defer end()
	return s.watch.Due(ctx, s.sql)
}

// errAbandoned ends a stop that could not reach the commit of the open transaction in time; its events are
// published again after the restart (duplicates, never loss).
var errAbandoned = errors.New("stop: the open transaction did not reach its commit in time")

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
		if s.frames.Ready() && s.readRun < maxReadRun {
			if err := s.buffered(); err != nil {
				return err
			}
			continue
		}
		s.readRun = 0
		if err := s.status(false); err != nil {
			return err
		}
		if err := s.publicationDue(); err != nil {
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

// maxReadRun bounds the messages handled one after the other from the read buffer (buffered) before the
// loop's duties run again.
const maxReadRun = 128

// buffered handles the next message, which came with an earlier read (Frames.Ready). The duties of the loop
// (the status update, the checks) ran before that read, and the server was heard at it, so they wait for
// the next read that can wait: a burst of WAL pays for them, and for the read deadline, once per read
// instead of once per message. The stop and a failed publisher are still looked at for every message.
func (s *session) buffered() error {
	s.readRun++
	select {
	case <-s.pub.Failed():
		return caused(metrics.CauseBroker, fmt.Errorf("publish: %w", s.pub.Err()))
	default:
	}
	f, err := s.frames.Next()
	if err != nil {
		return caused(metrics.CausePostgres, fmt.Errorf("receive: %w", err))
	}
	return s.frame(f)
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
	f, err := s.frames.Next()
	if err != nil {
		if !copyboth.ReadTimeout(err) {
			return caused(metrics.CausePostgres, fmt.Errorf("receive: %w", err))
		}
		s.readBy = time.Time{} // the deadline passed, or the stop request moved it: set a new one next time
		if !stopping && s.ctx.Err() != nil {
			return nil // the stop request: the loop takes it from here
		}
		if s.frames.Moved { // part of a large message arrived: slow, not silent
			s.frames.Moved = false
			s.heard()
			return nil
		}
		return s.quiet()
	}
	s.frames.Moved = false
	s.heard()
	return s.frame(f)
}

// readDeadline makes the next read end at most wait from now. It keeps the deadline already set while that
// one is after now and no later than now+wait, so a stream of messages shares one deadline instead of
// setting one per message.
func (w *walReceiver) readDeadline(wait time.Duration) error {
	now := time.Now()
	if !w.readBy.IsZero() && w.readBy.After(now) && !w.readBy.After(now.Add(wait)) {
		return nil
	}
	w.readBy = now.Add(wait)
	return w.conn.Conn().SetReadDeadline(w.readBy)
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

// connectReplication opens the replication connection (pgserver.ConnectReplication), which reads through
// the returned wire, each attempt bounded by d. A lease sets the walsender's wal_sender_timeout (fence.go):
// PostgreSQL then ends it, and the slot's lock its session holds, lease after the router's last word.
func connectReplication(ctx context.Context, url string, d, lease time.Duration) (*pgconn.PgConn, *copyboth.Wire, error) {
	var wireOf func() *copyboth.Wire
	conn, err := pgserver.ConnectReplication(ctx, url, d, func(cfg *pgconn.Config) {
		wireOf = copyboth.Install(cfg)
		if lease > 0 {
			if cfg.RuntimeParams == nil {
				cfg.RuntimeParams = map[string]string{}
			}
			cfg.RuntimeParams["wal_sender_timeout"] = fmt.Sprintf("%dms", lease.Milliseconds())
		}
	})
	if err != nil {
		return nil, nil, err
	}
	return conn, wireOf(), nil
}
