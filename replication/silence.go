package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// liveness finds a replication connection whose server stopped answering although the connection stays
// open (a stalled server, a silent network partition: TCP keepalives do not see a peer whose kernel still
// answers), as PostgreSQL's walreceiver does with wal_receiver_timeout: after half the bound without a
// message, a status update asks for an immediate reply (a walsender answers it with a keepalive, whatever
// its wal_sender_timeout); when nothing arrives within the other half either, the connection is dead. The
// bound counts only while the stream reads: a stream held back by a full publish window pings once it reads
// again, and the server then has half the bound to answer.
type liveness struct {
	bound  time.Duration
	last   time.Time // the last message from the server
	pinged time.Time // when a status update asked for a reply since then; zero if none did
}

func newLiveness(bound time.Duration, now time.Time) liveness {
	return liveness{bound: bound, last: now}
}

// heard records a message from the server.
func (s *session) heard() {
	now := time.Now()
	s.live.last, s.live.pinged = now, time.Time{}
	s.stats.Heard(now)
}

// quiet runs after a read that found no message: it sends the ping that is due, and ends the stream when
// the server did not answer one in time.
func (s *session) quiet() error {
	l, now := &s.live, time.Now()
	if l.bound <= 0 {
		return nil
	}
	if !l.pinged.IsZero() {
		if now.Sub(l.pinged) < l.bound/2 {
			return nil
		}
		return caused(metrics.CausePostgres, fmt.Errorf("PostgreSQL at %s sent nothing on the replication connection for %v, and did "+
			"not answer a status update that asked for a reply within %v (a stalled server or a silent network partition): "+
			"taking the connection as dead (the bound is --pg-timeout)", pgserver.Host(s.cfg.PGURL),
			now.Sub(l.last).Round(time.Second), now.Sub(l.pinged).Round(time.Second)))
	}
	if now.Sub(l.last) < l.bound/2 {
		return nil
	}
	pos := s.sent // a watermark already reported: the ping reports nothing new
	if pos == 0 {
		pos = s.tracker.Watermark()
	}
	l.pinged = now
	s.stats.Pinged(now)
	err := pglogrepl.SendStandbyStatusUpdate(context.Background(), s.conn,
		pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(pos), ReplyRequested: true})
	if err != nil {
		return caused(metrics.CausePostgres, fmt.Errorf("send standby status update: %w", err))
	}
	s.cfg.Fence.sent(now)
	return nil
}

// bounded is d, or --pg-timeout when that is shorter: a wait of the stream on the ordinary connection (the
// stored position, the slot's health) holds up the read loop, and so the detection of a silent server.
func (s *session) bounded(d time.Duration) time.Duration {
	if b := s.cfg.PGTimeout; b > 0 && b < d {
		return b
	}
	return d
}

// onPostgres is a wait of the stream on the ordinary connection (what it waits for, bounded by d and the
// stop): while it runs, the read loop reads nothing, so no ping can find a silent server. It is in the stats
// meanwhile, so that /readyz says so once it lasts (metrics.Stats.WaitingOnPostgres); end ends it.
func (s *session) onPostgres(what string, d time.Duration) (ctx context.Context, end func()) {
	ctx, cancel := s.stop.bounded(d)
	s.stats.WaitOnPostgres(what, time.Now())
	return ctx, func() { s.stats.WaitOnPostgres("", time.Time{}); cancel() }
}
