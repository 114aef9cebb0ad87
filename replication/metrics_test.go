package replication

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pgserver"
)

// TestLagFollowsTheOldestUnacknowledgedCommit: the lag in time is the age of the commit of the oldest
// received transaction not yet acknowledged, including the open one, and 0 once every received
// transaction is acknowledged, however long ago the last commit was (an idle database is not lag).
func TestLagFollowsTheOldestUnacknowledgedCommit(t *testing.T) {
	stats := &Stats{}
	s := &session{stats: stats}
	now := time.Now()
	s.pending = []pendingTxn{{end: 100, committed: now.Add(-10 * time.Second)}, {end: 200, committed: now.Add(-5 * time.Second)},
		{committed: now.Add(-time.Second)}} // the last one is open
	stats.oldestPending.Store(s.pending[0].committed.UnixNano())
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
	stats.oldestPending.Store(now.Add(time.Hour).UnixNano())
	if got := stats.Lag(); got != 0 {
		t.Errorf("lag %v for a commit timestamp ahead of the clock, want 0", got)
	}
}

func TestLagBytes(t *testing.T) {
	s := &Stats{}
	if _, ok := s.LagBytes(); ok {
		t.Error("lag bytes known before the stream said anything")
	}
	s.acked.Store(1000)
	s.walEnd.Store(1500)
	if lag, ok := s.LagBytes(); !ok || lag != 500 {
		t.Errorf("lag bytes %d %v, want 500", lag, ok)
	}
	s.acked.Store(2000) // acknowledged past the last WAL end heard of: no negative lag
	if lag, _ := s.LagBytes(); lag != 0 {
		t.Errorf("lag bytes %d, want 0", lag)
	}
}

// TestFlightOldest: the age of the oldest unconfirmed event follows confirms in any order.
func TestFlightOldest(t *testing.T) {
	f := newFlight()
	now := time.Now()
	a, b, c := f.add(now.Add(-30*time.Second)), f.add(now.Add(-20*time.Second)), f.add(now.Add(-10*time.Second))
	age := func(want time.Duration) {
		t.Helper()
		if got := f.oldest(); got < want || got > want+time.Second {
			t.Errorf("oldest %v, want about %v", got, want)
		}
	}
	age(30 * time.Second)
	f.done(b)
	age(30 * time.Second)
	f.done(a)
	age(10 * time.Second)
	f.done(c)
	if got := f.oldest(); got != 0 {
		t.Errorf("oldest %v with nothing in flight, want 0", got)
	}
	d := f.add(now)
	f.done(d)
	if got := f.oldest(); got != 0 || f.low != f.next {
		t.Errorf("oldest %v, low %d next %d after the last confirm", got, f.low, f.next)
	}
}

func TestCauseOf(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{caused(CauseBroker, errors.New("publish: nacked")), CauseBroker},
		{fmt.Errorf("run: %w", caused(CauseBroker, errors.New("dial"))), CauseBroker},
		{fmt.Errorf("receive: %w", &pgconn.PgError{Code: "57P01"}), CausePostgres},
		{fmt.Errorf("receive: %w", &net.OpError{Op: "read", Err: errors.New("connection reset")}), CausePostgres},
		{fmt.Errorf("check publication: failed to deallocate cached statement(s): %w", pgconn.ErrConnClosed), CausePostgres},
		{fmt.Errorf("store position: %w", context.DeadlineExceeded), CausePostgres},
		{errors.New("something else"), CauseOther},
	} {
		if got := causeOf(tc.err); got != tc.want {
			t.Errorf("causeOf(%v) = %s, want %s", tc.err, got, tc.want)
		}
	}
	if got := caused(CauseBroker, errors.New("publish: x")).Error(); got != "publish: x" {
		t.Errorf("a caused error reads %q, want the wrapped error's text", got)
	}
}

// TestStatsMetrics: the collector passes Prometheus's lint, writes the state as an enum, counts by label,
// and exports the slot's health only once it was read.
func TestStatsMetrics(t *testing.T) {
	s := &Stats{}
	reg := prometheus.NewRegistry()
	if err := s.Register(reg); err != nil {
		t.Fatal(err)
	}
	s.setState(StateStreaming, nil)
	s.confirmed(time.Now().Add(-time.Second))
	s.quarantinedAs(QuarantineRefused)
	s.restarted(CauseBroker)
	s.snapshotProgress(10, 100)
	s.snapshotObserved(40, 100)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
	want := `
# HELP cdc_router_events_published_total Events the broker confirmed, by source: stream (the slot), snapshot (the initial snapshot run by this process).
# TYPE cdc_router_events_published_total counter
cdc_router_events_published_total{source="snapshot"} 30
cdc_router_events_published_total{source="stream"} 1
# HELP cdc_router_state 1 for the router's current state (starting, snapshot, streaming, standby, restarting, stopped), 0 for the others.
# TYPE cdc_router_state gauge
cdc_router_state{state="restarting"} 0
cdc_router_state{state="snapshot"} 0
cdc_router_state{state="standby"} 0
cdc_router_state{state="starting"} 0
cdc_router_state{state="stopped"} 0
cdc_router_state{state="streaming"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cdc_router_state", "cdc_router_events_published_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "cdc_router_slot_active"); n != 0 {
		t.Errorf("slot metrics before the first slot health read: %d series, want none", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if m.GetCounter() != nil && m.GetCounter().GetValue() > 0 {
					counts[mf.GetName()+"/"+l.GetValue()] = m.GetCounter().GetValue()
				}
			}
			if h := m.GetHistogram(); h != nil {
				counts[mf.GetName()] = float64(h.GetSampleCount())
			}
		}
	}
	for key, want := range map[string]float64{"cdc_router_events_quarantined_total/refused": 1,
		"cdc_router_stream_restarts_total/broker": 1, "cdc_router_commit_to_confirm_seconds": 1} {
		if counts[key] != want {
			t.Errorf("%s = %v, want %v (all: %v)", key, counts[key], want, counts)
		}
	}
	s.setSlot(pgserver.SlotHealth{Checked: time.Now(), Active: true, WALStatus: "extended", SafeWALBytes: 5 << 20, SafeWALKnown: true,
		RetainedBytes: 7 << 20, MaxKeepBytes: 1 << 30})
	want = `
# HELP cdc_router_slot_wal_status 1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others, from the last slot health read.
# TYPE cdc_router_slot_wal_status gauge
cdc_router_slot_wal_status{wal_status="extended"} 1
cdc_router_slot_wal_status{wal_status="lost"} 0
cdc_router_slot_wal_status{wal_status="reserved"} 0
cdc_router_slot_wal_status{wal_status="unreserved"} 0
# HELP cdc_router_slot_safe_wal_size_bytes WAL that can still be written before PostgreSQL invalidates the slot (safe_wal_size); absent when max_slot_wal_keep_size is -1 (no limit).
# TYPE cdc_router_slot_safe_wal_size_bytes gauge
cdc_router_slot_safe_wal_size_bytes 5.24288e+06
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "cdc_router_slot_wal_status", "cdc_router_slot_safe_wal_size_bytes"); err != nil {
		t.Error(err)
	}
	s.setState(StateStandby, nil) // a standby does not report the slot
	if n := testutil.CollectAndCount(reg, "cdc_router_slot_wal_status"); n != 0 {
		t.Errorf("a standby exports %d wal_status series, want none", n)
	}
}

// BenchmarkConfirmBookkeeping is what the metrics add to each streamed event: the in-flight record at
// hand-over, and at the confirm the counter, the commit-to-confirm observation and the in-flight removal.
func BenchmarkConfirmBookkeeping(b *testing.B) {
	s := &Stats{}
	f := newFlight()
	committed := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		seq := f.add(time.Now())
		s.confirmed(committed)
		f.done(seq)
	}
}

// TestLagGoesOnThroughARestart: a session that ends with a transaction unacknowledged hands its commit time
// to the next session when that one starts from the same position, so the lag does not drop to 0 while
// the transaction is read again; the re-read transaction's commit closes it. A session that starts
// elsewhere (another router moved the slot) starts with no lag.
func TestLagGoesOnThroughARestart(t *testing.T) {
	stats := &Stats{}
	old := time.Now().Add(-time.Minute)
	first := &session{stats: stats, pending: []pendingTxn{{end: 200, committed: old}, {committed: time.Now()}}, sent: 100}
	stats.oldestPending.Store(old.UnixNano())
	stats.carry(first.pending, first.sent)

	next := &session{stats: stats, pending: stats.takeCarried(100), tracker: offsets.NewTracker(100)}
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

	stats.carry([]pendingTxn{{committed: old}}, 300)
	if c := stats.takeCarried(400); c != nil {
		t.Errorf("a session starting at another position got %v", c)
	}
}
