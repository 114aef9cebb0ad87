package metrics

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/pgserver"
)

// States of the router, as Stats reports them.
const (
	StateStarting  = "starting"  // checking the setup and connecting
	StateSnapshot  = "snapshot"  // copying the rows already in the table; the slot is not streamed yet
	StateStreaming = "streaming" // reading the slot
	// StateStandby: another router holds the slot (its advisory lock, or its walsender at START_REPLICATION);
	// this one tries again every second and takes over when the slot is free. Not a restart.
	StateStandby    = "standby"
	StateRestarting = "restarting" // waiting to restart the stream after a failure
	StateStopped    = "stopped"
)

// states lists every state, for the cdc_router_state enum.
var states = []string{StateStarting, StateSnapshot, StateStreaming, StateStandby, StateRestarting, StateStopped}

// Quarantine reason classes (cdc_router_events_quarantined_total's reason label).
const (
	QuarantineRow           = "row"           // the decoder: a row that cannot become an event (or drifted, with --on-drift=quarantine)
	QuarantineUnpublishable = "unpublishable" // the publisher's checks: RabbitMQ would refuse the message
	QuarantineRefused       = "refused"       // RabbitMQ refused the event repeatedly while it was alone in flight
)

// Restart causes (cdc_router_stream_restarts_total's cause label).
const (
	CauseBroker   = "broker"   // the publisher failed: a nack, a return, a confirm timeout, a lost connection, a failed dial
	CausePostgres = "postgres" // the replication or the ordinary connection failed, or PostgreSQL reported an error
	CauseOther    = "other"
)

var (
	quarantineClasses = []string{QuarantineRow, QuarantineUnpublishable, QuarantineRefused}
	restartCauses     = []string{CauseBroker, CausePostgres, CauseOther}
)

// Stats is what the router did since the process started, safe for concurrent readers (health and
// metrics endpoints, Collector). The zero value is ready to use.
type Stats struct {
	published     atomic.Int64 // streamed events confirmed
	snapPublished atomic.Int64 // snapshot rows confirmed by this process
	quarantined   atomic.Int64
	quarByClass   [3]atomic.Int64 // by quarantineClasses
	restarts      atomic.Int64
	restartCause  [3]atomic.Int64 // by restartCauses
	acked         atomic.Uint64
	snapDone      atomic.Int64
	snapTotal     atomic.Int64

	walEnd        atomic.Uint64          // the server's WAL end, from the last keepalive or XLogData
	heard         atomic.Int64           // when (Unix ns) the walsender last sent anything, in any session; 0 if never
	silentAfter   atomic.Int64           // the --pg-timeout bound (ns): a longer silence of the walsender counts as lag
	pinged        atomic.Int64           // when (Unix ns) the stream asked the silent walsender for a reply it has not had; 0 if none
	pgWait        atomic.Pointer[pgWait] // the stream's wait on the ordinary connection now; nil if none
	oldestPending atomic.Int64           // commit time (Unix ns) of the oldest received, unacknowledged transaction; 0 if none
	flight        atomic.Pointer[Flight] // the running session's unconfirmed events
	carried       time.Time              // the commit of the oldest unacknowledged transaction of the last session
	carriedFrom   cdc.LSN                // the acknowledged position the last session ended at
	histOnce      sync.Once
	commitConfirm prometheus.Histogram

	mu      sync.Mutex
	state   string
	since   time.Time
	lastErr string
	errAt   time.Time // when lastErr was recorded
	problem string    // a condition that makes the router unready while it runs, e.g. the publication lost the outbox
	spare   string    // what would keep this router, standing by, from taking over (SetStandbyProblem)
	slot    pgserver.SlotHealth
	// waiting is what the router waits for while it is not streaming (a connection, the start-up checks, the
	// slot's creation, the restart backoff), since waitingSince; empty while streaming, snapshotting or standing by.
	waiting      string
	waitingBase  string // the text the current wait began with
	waitingSince time.Time
}

// Waiting says what the router waits for and since how long, while it starts or restarts: the connection,
// the query or the transactions it is held up by. Empty while it streams, copies a snapshot or stands by.
func (s *Stats) Waiting() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case StateStreaming, StateSnapshot, StateStandby, StateStopped:
		return ""
	}
	if s.waiting == "" {
		return ""
	}
	return fmt.Sprintf("waiting %v for %s", time.Since(s.waitingSince).Round(time.Second), s.waiting)
}

// WaitingOn is Waiting's parts: what the router waits for and since when ("" and the zero time when it
// waits for nothing, or streams, copies a snapshot or stands by).
func (s *Stats) WaitingOn() (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch s.state {
	case StateStreaming, StateSnapshot, StateStandby, StateStopped:
		return "", time.Time{}
	}
	return s.waiting, s.waitingSince
}

// WaitFor records what the router waits for now; the time counts from the first call with this text, or
// with the text this one extends (the same wait told in more detail: a slot's creation, then the
// transactions it waits for).
func (s *Stats) WaitFor(what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.waiting == "" || !strings.HasPrefix(what, s.waitingBase) {
		s.waitingBase, s.waitingSince = what, time.Now()
	}
	s.waiting = what
}

// Problem is what makes a running router unready although it streams (empty when nothing does): the
// publication no longer carries the outbox table's inserts, so new rows are not streamed; or, standing by,
// what would keep it from taking over (SetStandbyProblem).
func (s *Stats) Problem() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.problem == "" && s.state == StateStandby {
		return s.spare
	}
	return s.problem
}

// SetStandbyProblem records what would keep this router from taking over the slot while it stands by ("" when
// nothing would): a broker it cannot reach or may not use. It is set and read only in StateStandby, and kept
// while the router is in another state: a standby that restarts (a PostgreSQL blip) and stands by again is
// unready as before until its next check says otherwise.
func (s *Stats) SetStandbyProblem(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state == StateStandby {
		s.spare = p
	}
}

// SetProblem records what makes the running router unready ("" when nothing does).
func (s *Stats) SetProblem(p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problem = p
}

// Published is the number of streamed events confirmed by the broker.
func (s *Stats) Published() int64 { return s.published.Load() }

// SnapshotPublished is the number of snapshot rows this process published and the broker confirmed.
func (s *Stats) SnapshotPublished() int64 { return s.snapPublished.Load() }

// Quarantined is the number of streamed rows and refused events written to the quarantine table.
func (s *Stats) Quarantined() int64 { return s.quarantined.Load() }

// Restarts is the number of in-process stream restarts after a failure.
func (s *Stats) Restarts() int64 { return s.restarts.Load() }

// Acknowledged is the last position acknowledged to PostgreSQL.
func (s *Stats) Acknowledged() cdc.LSN { return cdc.LSN(s.acked.Load()) }

// LagBytes is the server's WAL end (from the last keepalive or XLogData) minus the acknowledged position;
// ok is false before the first message of the stream.
func (s *Stats) LagBytes() (lag int64, ok bool) {
	end, acked := s.walEnd.Load(), s.acked.Load()
	if end == 0 || acked == 0 {
		return 0, false
	}
	return max(int64(end)-int64(acked), 0), true
}

// Lag is the replication lag in time: how long ago the oldest transaction was committed whose events
// were received but are not all confirmed and acknowledged yet, or, when longer, how long the walsender has
// sent nothing once that passes the --pg-timeout bound (a healthy one answers the stream's ping within it):
// a router that cannot read WAL (a stalled PostgreSQL, a partition, a restart loop) does not know what was
// committed since, so its lag grows from the last moment it did. It is zero when every received transaction
// is acknowledged and the walsender speaks, so an idle database (nothing to send) does not look stuck.
// Before the first stream of the process, and in standby, only the first part counts.
func (s *Stats) Lag() time.Duration {
	var lag time.Duration
	if c := s.oldestPending.Load(); c != 0 {
		lag = max(time.Since(time.Unix(0, c)), 0)
	}
	if h := s.heard.Load(); h != 0 {
		bound := time.Duration(s.silentAfter.Load())
		if bound <= 0 {
			bound = pgserver.DefaultPGTimeout
		}
		if quiet := time.Since(time.Unix(0, h)); quiet > bound {
			lag = max(lag, quiet)
		}
	}
	return lag
}

// OldestUnconfirmed is how long the oldest event handed to the publisher by the running stream has waited
// for its confirm; zero when none waits.
func (s *Stats) OldestUnconfirmed() time.Duration {
	if f := s.flight.Load(); f != nil {
		return f.Oldest()
	}
	return 0
}

// Snapshot is the progress of the initial snapshot this process ran or runs (zero when none).
func (s *Stats) Snapshot() (done, total int64) { return s.snapDone.Load(), s.snapTotal.Load() }

// State is the current state, since when, and the error that caused the last restart.
func (s *Stats) State() (state string, since time.Time, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state, s.since, s.lastErr
}

// LastError is the error that caused the last restart and when it did; "" and the zero time before any.
func (s *Stats) LastError() (string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr, s.errAt
}

// Slot is the slot's health as last read from pg_replication_slots (zero Checked before the first read).
func (s *Stats) Slot() pgserver.SlotHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.slot
}

// SetSlot records the slot's health as just read.
func (s *Stats) SetSlot(h pgserver.SlotHealth) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.slot = h
}

// SetState records the router's state, and the error that caused it (a restart's) when err is not nil.
func (s *Stats) SetState(state string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.state != state {
		s.state, s.since = state, time.Now()
		s.pinged.Store(0) // a request of the last session has no answer to wait for
		s.pgWait.Store(nil)
	}
	if err != nil {
		s.lastErr, s.errAt = err.Error(), time.Now()
	}
	if state == StateStandby {
		s.slot = pgserver.SlotHealth{} // the active router reports the slot; a spare would report it twice
		s.heard.Store(0)               // and its lag: the silence of a slot this router does not read is not lag
	}
	if state != StateStarting && state != StateRestarting {
		s.waiting = ""
	}
}

// SnapshotProgress records the snapshot's progress at its start (or resumption).
func (s *Stats) SnapshotProgress(done, total int64) {
	s.snapDone.Store(done)
	s.snapTotal.Store(total)
}

// SnapshotObserved records the snapshot's progress as it goes; the rows confirmed since the last call
// count as published by this process.
func (s *Stats) SnapshotObserved(done, total int64) {
	if prev := s.snapDone.Swap(done); done > prev {
		s.snapPublished.Add(done - prev)
	}
	s.snapTotal.Store(total)
}

// QuarantinedAs counts one quarantined row or event under its reason class (QuarantineRow, ...).
func (s *Stats) QuarantinedAs(class string) {
	s.quarantined.Add(1)
	for i, c := range quarantineClasses {
		if c == class {
			s.quarByClass[i].Add(1)
		}
	}
}

// Restarted counts one stream restart under its cause (CauseBroker, ...).
func (s *Stats) Restarted(cause string) {
	s.restarts.Add(1)
	for i, c := range restartCauses {
		if c == cause {
			s.restartCause[i].Add(1)
		}
	}
}

// histogram is the commit-to-confirm histogram, made on first use so that the zero Stats works.
func (s *Stats) histogram() prometheus.Histogram {
	s.histOnce.Do(func() {
		s.commitConfirm = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cdc_router_commit_to_confirm_seconds",
			Help: "Time from a streamed event's commit in PostgreSQL (pgoutput's commit timestamp, the primary's clock) " +
				"to the broker's positive confirm.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 18)})
	})
	return s.commitConfirm
}

// Carry keeps, when a session ends at the acknowledged position acked, the commit time of its oldest
// unacknowledged transaction (zero: none) for the next session, which holds it as an open entry: a session
// that starts from that same position reads that transaction again as the first one with events, and its
// commit closes the entry as usual. So the lag goes on growing through a restart instead of reading 0 until
// the transaction is received again. A session that starts elsewhere (another router advanced the slot
// meanwhile) gets nothing. Only the stream's goroutine calls Carry and TakeCarried.
func (s *Stats) Carry(committed time.Time, acked cdc.LSN) {
	s.carried, s.carriedFrom = committed, acked
}

// TakeCarried returns what Carry kept for a session that starts at start (zero: nothing) and forgets it.
func (s *Stats) TakeCarried(start cdc.LSN) time.Time {
	c := s.carried
	s.carried = time.Time{}
	if start != s.carriedFrom {
		return time.Time{}
	}
	return c
}

// SetOldestPending records the commit time of the oldest received transaction not yet acknowledged (zero:
// none), the lag in time.
func (s *Stats) SetOldestPending(committed time.Time) {
	if committed.IsZero() {
		s.oldestPending.Store(0)
		return
	}
	s.oldestPending.Store(committed.UnixNano())
}

// SetWALEnd records the server's WAL end from a keepalive or an XLogData.
func (s *Stats) SetWALEnd(end cdc.LSN) { s.walEnd.Store(uint64(end)) }

// SetAcknowledged records the position last acknowledged to PostgreSQL.
func (s *Stats) SetAcknowledged(w cdc.LSN) { s.acked.Store(uint64(w)) }

// Heard records that the walsender sent something at now.
func (s *Stats) Heard(now time.Time) { s.heard.Store(now.UnixNano()); s.pinged.Store(0) }

// Pinged records that the stream, after half of --pg-timeout without a message, asked the walsender for an
// immediate reply at now; the next message (Heard) answers it.
func (s *Stats) Pinged(now time.Time) { s.pinged.Store(now.UnixNano()) }

// pgWait is a wait of the stream on PostgreSQL's ordinary connection.
type pgWait struct {
	what  string
	since time.Time
}

// WaitOnPostgres records that the stream began to wait for PostgreSQL to do what (what "" and a zero since:
// the wait ended).
func (s *Stats) WaitOnPostgres(what string, since time.Time) {
	if what == "" {
		s.pgWait.Store(nil)
		return
	}
	s.pgWait.Store(&pgWait{what, since})
}

// PostgresWaitSince is when the wait WaitOnPostgres last recorded began, zero when none is recorded.
func (s *Stats) PostgresWaitSince() time.Time {
	if w := s.pgWait.Load(); w != nil {
		return w.since
	}
	return time.Time{}
}

// WaitingOnPostgres is the readiness problem of a wait of the stream on the ordinary connection that has
// lasted half of --pg-timeout, at most 5 s and at least 1 s (a healthy server answers such a query at
// once), or "": meanwhile the stream reads nothing, so only this says that PostgreSQL may have gone silent.
func (s *Stats) WaitingOnPostgres() string {
	w := s.pgWait.Load()
	if w == nil {
		return ""
	}
	bound := time.Duration(s.silentAfter.Load())
	if bound <= 0 {
		bound = pgserver.DefaultPGTimeout
	}
	waited := time.Since(w.since)
	if waited < max(min(bound/2, 5*time.Second), time.Second) {
		return ""
	}
	return fmt.Sprintf("the stream has waited %v for PostgreSQL to %s (a stalled server or a silent network "+
		"partition?), reading nothing meanwhile", waited.Round(100*time.Millisecond), w.what)
}

// Unanswered is the readiness problem of a walsender that has not answered the stream's request for a reply
// for a while (a quarter of --pg-timeout, at most 2 s: a healthy one answers at once), or "": PostgreSQL
// may have stopped answering, which the stream takes as a dead connection once --pg-timeout has passed.
// So a silent server makes /readyz 503 after about half of --pg-timeout rather than all of it.
func (s *Stats) Unanswered() string {
	p := s.pinged.Load()
	if p == 0 {
		return ""
	}
	bound := time.Duration(s.silentAfter.Load())
	if bound <= 0 {
		bound = pgserver.DefaultPGTimeout
	}
	waited := time.Since(time.Unix(0, p))
	if waited < min(bound/4, 2*time.Second) {
		return ""
	}
	quiet := time.Duration(0)
	if h := s.heard.Load(); h != 0 {
		quiet = time.Since(time.Unix(0, h))
	}
	return fmt.Sprintf("PostgreSQL has sent nothing on the replication connection for %v and has not answered the "+
		"stream's request for a reply for %v (a stalled server or a silent network partition?): the router takes the "+
		"connection as dead after --pg-timeout %v", quiet.Round(time.Second), waited.Round(100*time.Millisecond), bound)
}

// SetSilentAfter records the --pg-timeout bound past which the walsender's silence counts as lag.
func (s *Stats) SetSilentAfter(bound time.Duration) { s.silentAfter.Store(int64(bound)) }

// SetFlight records the running session's unconfirmed events (nil: no session runs).
func (s *Stats) SetFlight(f *Flight) { s.flight.Store(f) }

// Confirmed counts one streamed event the broker confirmed.
func (s *Stats) Confirmed(committed time.Time) {
	s.published.Add(1)
	if !committed.IsZero() {
		s.histogram().Observe(max(time.Since(committed).Seconds(), 0))
	}
}
