package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
)

// TestLagFollowsTheOldestUnacknowledgedCommit: the lag in time is the age of the commit of the oldest
// received transaction not yet acknowledged, including the open one, and 0 once every received
// transaction is acknowledged, however long ago the last commit was (an idle database is not lag).
func TestLagFollowsTheOldestUnacknowledgedCommit(t *testing.T) {
	stats := &metrics.Stats{}
	s := &session{stats: stats}
	now := time.Now()
	s.pending = []pendingTxn{{end: 100, committed: now.Add(-10 * time.Second)}, {end: 200, committed: now.Add(-5 * time.Second)},
		{committed: now.Add(-time.Second)}} // the last one is open
	stats.SetOldestPending(s.pending[0].committed)
	near := func(want time.Duration) {
		t.Helper()
		if got := stats.Lag(); got < want || got > want+time.Second {
			t.Errorf("lag %v, want about %v", got, want)
		}
	}
	near(10 * time.Second)
	s.acknowledged(50) // before the first end: nothing changes
	near(10 * time.Second)
	s.acknowledged(100)
	near(5 * time.Second)
	s.acknowledged(300) // past every closed transaction: the open one is left
	near(time.Second)
	s.pending[0].end = 400
	s.acknowledged(400)
	if got := stats.Lag(); got != 0 {
		t.Errorf("lag %v with everything acknowledged, want 0", got)
	}
	if len(s.pending) != 0 {
		t.Errorf("pending %v, want none", s.pending)
	}
	// A commit in the future (the primary's clock ahead of the router's) is no negative lag.
	stats.SetOldestPending(now.Add(time.Hour))
	if got := stats.Lag(); got != 0 {
		t.Errorf("lag %v for a commit timestamp ahead of the clock, want 0", got)
	}
}

func TestCauseOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{caused(metrics.CauseBroker, errors.New("publish: nacked")), metrics.CauseBroker},
		{fmt.Errorf("run: %w", caused(metrics.CauseBroker, errors.New("dial"))), metrics.CauseBroker},
		{fmt.Errorf("receive: %w", &pgconn.PgError{Code: "57P01"}), metrics.CausePostgres},
		{fmt.Errorf("receive: %w", &net.OpError{Op: "read", Err: errors.New("connection reset")}), metrics.CausePostgres},
		{fmt.Errorf("check publication: failed to deallocate cached statement(s): %w", pgconn.ErrConnClosed), metrics.CausePostgres},
		{fmt.Errorf("store position: %w", context.DeadlineExceeded), metrics.CausePostgres},
		{fmt.Errorf("read the columns of public.outbox: %w", io.ErrUnexpectedEOF), metrics.CausePostgres},
		{errors.New("PostgreSQL at a:5432 refused the connection: the database system is starting up (SQLSTATE 57P03)"), metrics.CausePostgres},
		// The snapshot's publisher lost its connection (a write to RabbitMQ reset: a net.Error like PostgreSQL's).
		{fmt.Errorf("initial snapshot: %w", cdc.BrokerFailure(fmt.Errorf("publish: %w", &net.OpError{Op: "write", Err: errors.New("connection reset by peer")}))), metrics.CauseBroker},
		{cdc.BrokerFailure(errors.New("publish: connection closed by the broker: 320 CONNECTION_FORCED")), metrics.CauseBroker},
		{errors.New("something else"), metrics.CauseOther},
	} {
		if got := causeOf(tc.err); got != tc.want {
			t.Errorf("causeOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	if got := caused(metrics.CauseBroker, errors.New("publish: x")).Error(); got != "publish: x" {
		t.Errorf("a caused error reads %q, want the wrapped error's text", got)
	}
}

// TestLagGoesOnThroughARestart: a session that ends with a transaction unacknowledged hands its commit time
// to the next session when that one starts from the same position, so the lag does not drop to 0 while
// the transaction is read again; the re-read transaction's commit closes it. A session that starts
// elsewhere (another router moved the slot) starts with no lag.
func TestLagGoesOnThroughARestart(t *testing.T) {
	stats := &metrics.Stats{}
	old := time.Now().Add(-time.Minute)
	first := &session{stats: stats, txns: txns{pending: []pendingTxn{{end: 200, committed: old}, {committed: time.Now()}}},
		acks: acks{sent: 100}}
	stats.SetOldestPending(old)
	stats.Carry(oldestCommit(first.pending), first.sent)

	next := &session{stats: stats, txns: txns{pending: carried(stats.TakeCarried(100))}, tracker: offsets.NewTracker(100)}
	next.cur = next.tracker.Begin()
	next.acknowledged(100) // the new session's first status update, before anything is read again
	if lag := stats.Lag(); lag < time.Minute {
		t.Fatalf("lag %v right after the restart, want the old transaction's minute", lag)
	}
	next.Commit(150, 200) // the same transaction read again
	next.acknowledged(200)
	if lag := stats.Lag(); lag != 0 {
		t.Errorf("lag %v once the re-read transaction is acknowledged, want 0", lag)
	}

	stats.Carry(old, 300)
	if c := stats.TakeCarried(400); !c.IsZero() {
		t.Errorf("a session starting at another position got %v", c)
	}
}
