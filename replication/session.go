package replication

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/copyboth"
	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pubcheck"
	"github.com/cdc-router/cdc-router/quarantine"
)

// session is one run of the stream: one replication connection, one publisher, one tracker. Its state is
// split into parts, each owned by the part of the session that writes it (the file named with each part);
// the others only read it:
//   - walReceiver (stream.go, streamframe.go, silence.go): the replication connection and reading WAL from it;
//   - txns (handler.go, lag.go): the transactions received, the open one and those not yet acknowledged;
//   - acks (ack.go): the standby status updates and the stored position: what was acknowledged, and when;
//   - replayMark (resume.go): the progress inside a transaction that a replay passes over;
//   - publishing (publish.go): handing events to the publisher, the safety net and what is in flight;
//   - quarantining (publish.go, burst.go): the rows and messages stored instead of published;
//   - duties (the loop in stream.go): the checks the loop runs between two reads.
//
// The tracker is shared: received items are added to it (txns, publishing), confirms resolve them (the
// publisher's goroutines through done), and only acks reports its watermark. Only the session's goroutine
// touches anything but the tracker and the flight.
type session struct {
	ctx     context.Context // ends at the stop request
	stop    *stopClock      // the bound of the whole stop
	cfg     Config
	log     *slog.Logger
	sql     *pgx.Conn // ordinary connection: stored position and quarantine
	store   *offsets.Store
	tracker *offsets.Tracker
	dec     *decode.Decoder
	sys     pglogrepl.IdentifySystemResult
	stats   *metrics.Stats

	stopLogged bool // the stop request was logged

	walReceiver
	txns
	acks
	replayMark
	publishing
	quarantining
	duties
}

// walReceiver is the replication connection, owned by the session's goroutine only: written through
// pgconn (status updates) and read through frames from START_REPLICATION on.
type walReceiver struct {
	conn   *pgconn.PgConn
	frames *copyboth.Frames
	live   liveness // finds a server that stopped answering (a status update asks for a reply)
	// readBy is the read deadline set on the replication connection's socket, shared by consecutive reads
	// (readDeadline); zero when none is set. stopRead interrupts a read at the stop request.
	readBy   time.Time
	stopRead func() bool
	readRun  int // messages handled from the read buffer since the loop's duties last ran (buffered)
}

// txns is what the session knows of the transactions it received.
type txns struct {
	cur     offsets.Txn
	inTxn   bool
	lastEnd cdc.LSN // end of the last commit received
	// lastEventEnd is the end of the last commit received of a transaction with an event or a quarantined
	// row; eventful says whether the open transaction has one.
	lastEventEnd cdc.LSN
	eventful     bool
	pending      []pendingTxn // received transactions with events, not yet acknowledged, in commit order
}

// acks is what the session reported to PostgreSQL in standby status updates.
type acks struct {
	sent       cdc.LSN   // last position sent in a status update
	sentAt     time.Time // when it was sent
	nextStatus time.Time // when the timer wants the next status update
}

// replayMark is the progress inside a transaction a previous run recorded (resumePoint.choose), until the
// replay of that transaction begins: resumeAt; skip is how many items of the open transaction are still to
// be passed over, resumed how many were in all; markBroken says the replay had fewer items than its mark
// (it stops the session, and no mark is kept). markConfig is the fingerprint the marks are counted under.
type replayMark struct {
	resumeAt   offsets.Mark
	markConfig string
	skip       int
	resumed    int
	markBroken bool
}

// publishing is the session's side of the publisher.
type publishing struct {
	pub Publisher
	// pubCtx bounds a blocked Publish so that status updates go on and a stop is noticed at once; one is
	// shared by every publish until it ends, instead of one timer per event.
	pubCtx    context.Context
	pubCancel context.CancelFunc
	net       *safetyNet      // finds the event the broker keeps refusing; shared by the runs of one Run
	flight    *metrics.Flight // the events handed to the publisher and not yet confirmed
}

// quarantining is where the session stores what it does not publish.
type quarantining struct {
	quar   *quarantine.Store // the quarantine table
	bursts bursts            // the quarantine records of emitted messages being aggregated
}

// duties are the checks the stream's loop runs between two reads, each on its own interval.
type duties struct {
	watch    *pubcheck.Watch      // re-checks that the publication still carries the outbox
	emitKeys *emitKeyWatch        // reloads the keys of emitted messages (--message-prefix)
	progress *metrics.ProgressLog // an info line per interval while events flow
	slot     slotWatch            // reads the slot's health for the metrics and the readiness check
}
