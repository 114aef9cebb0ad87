package metrics

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/cdc-router/cdc-router/pgserver"
)

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
	f := NewFlight()
	now := time.Now()
	a, b, c := f.Add(now.Add(-30*time.Second)), f.Add(now.Add(-20*time.Second)), f.Add(now.Add(-10*time.Second))
	age := func(want time.Duration) {
		t.Helper()
		if got := f.Oldest(); got < want || got > want+time.Second {
			t.Errorf("oldest %v, want about %v", got, want)
		}
	}
	age(30 * time.Second)
	f.Done(b)
	age(30 * time.Second)
	f.Done(a)
	age(10 * time.Second)
	f.Done(c)
	if got := f.Oldest(); got != 0 {
		t.Errorf("oldest %v with nothing in flight, want 0", got)
	}
	d := f.Add(now)
	f.Done(d)
	if got := f.Oldest(); got != 0 || f.low != f.next {
		t.Errorf("oldest %v, low %d next %d after the last confirm", got, f.low, f.next)
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
	s.SetState(StateStreaming, nil)
	s.Confirmed(time.Now().Add(-time.Second))
	s.QuarantinedAs(QuarantineRefused)
	s.Restarted(CauseBroker)
	s.SnapshotProgress(10, 100)
	s.SnapshotObserved(40, 100)
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
	s.SetSlot(pgserver.SlotHealth{Checked: time.Now(), Active: true, WALStatus: "extended", SafeWALBytes: 5 << 20, SafeWALKnown: true,
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
	s.SetState(StateStandby, nil) // a standby does not report the slot
	if n := testutil.CollectAndCount(reg, "cdc_router_slot_wal_status"); n != 0 {
		t.Errorf("a standby exports %d wal_status series, want none", n)
	}
}

// BenchmarkConfirmBookkeeping is what the metrics add to each streamed event: the in-flight record at
// hand-over, and at the confirm the counter, the commit-to-confirm observation and the in-flight removal.
func BenchmarkConfirmBookkeeping(b *testing.B) {
	s := &Stats{}
	f := NewFlight()
	committed := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		seq := f.Add(time.Now())
		s.Confirmed(committed)
		f.Done(seq)
	}
}

// TestFlightModel: thousands of events in flight, confirmed in random order (as the lanes of route confirm
// them), the oldest age stays that of the oldest unconfirmed one of a reference set, and the queue reuses
// its room: it never grows past a few times the most events it spanned (oldest unconfirmed to newest).
func TestFlightModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	f := NewFlight()
	base := time.Now().Add(-time.Hour)
	open := map[uint64]time.Time{}
	var seqs []uint64
	span := uint64(0)
	for step := range 200_000 {
		span = max(span, f.next-f.low)
		if len(seqs) < 5000 && rng.IntN(2) == 0 {
			at := base.Add(time.Duration(step) * time.Millisecond)
			seq := f.Add(at)
			open[seq] = at
			seqs = append(seqs, seq)
		} else if len(seqs) > 0 {
			i := rng.IntN(min(len(seqs), 64)) // confirms come roughly, not exactly, in hand-over order
			f.Done(seqs[i])
			delete(open, seqs[i])
			seqs = append(seqs[:i], seqs[i+1:]...)
		}
		if step%997 != 0 {
			continue
		}
		var oldest time.Time
		for _, at := range open {
			if oldest.IsZero() || at.Before(oldest) {
				oldest = at
			}
		}
		got, want := f.Oldest(), time.Duration(0)
		if !oldest.IsZero() {
			want = time.Since(oldest)
		}
		if got < want-time.Second || got > want+time.Second {
			t.Fatalf("step %d: oldest %v, want about %v (%d in flight)", step, got, want, len(open))
		}
		if cap(f.handed) > 4*int(span)+64 {
			t.Fatalf("step %d: a queue of %d for at most %d events spanned", step, cap(f.handed), span)
		}
	}
}

// TestUnansweredPing: a request for a reply unanswered for a quarter of the bound (at most 2 s) is a
// readiness problem naming the silence; an answer (Heard) or a new state clears it.
func TestUnansweredPing(t *testing.T) {
	s := &Stats{}
	s.SetSilentAfter(4 * time.Second)
	if p := s.Unanswered(); p != "" {
		t.Fatalf("Unanswered before any ping = %q", p)
	}
	s.Heard(time.Now().Add(-3 * time.Second))
	s.Pinged(time.Now())
	if p := s.Unanswered(); p != "" {
		t.Errorf("Unanswered right after the ping = %q, want none yet", p)
	}
	s.Pinged(time.Now().Add(-1100 * time.Millisecond))
	if p := s.Unanswered(); !strings.Contains(p, "has not answered the stream's request for a reply for 1.1s") ||
		!strings.Contains(p, "for 3s") || !strings.Contains(p, "--pg-timeout 4s") {
		t.Errorf("Unanswered 1.1 s after the ping with a 4 s bound = %q", p)
	}
	s.Heard(time.Now())
	if p := s.Unanswered(); p != "" {
		t.Errorf("Unanswered after the answer = %q", p)
	}
	s.Pinged(time.Now().Add(-time.Minute))
	s.SetState(StateRestarting, nil)
	if p := s.Unanswered(); p != "" {
		t.Errorf("Unanswered after a restart = %q", p)
	}
}

// TestWaitingOnPostgres: a wait of the stream on the ordinary connection is a readiness problem naming it
// once it has lasted half the bound (at most 5 s, at least 1 s); its end or a new state clears it.
func TestWaitingOnPostgres(t *testing.T) {
	s := &Stats{}
	s.SetSilentAfter(30 * time.Second)
	s.WaitOnPostgres("write a quarantine record", time.Now().Add(-4*time.Second))
	if p := s.WaitingOnPostgres(); p != "" {
		t.Errorf("after 4 s of a wait with a 30 s bound: %q, want none yet", p)
	}
	s.WaitOnPostgres("write a quarantine record", time.Now().Add(-6*time.Second))
	if p := s.WaitingOnPostgres(); !strings.Contains(p, "waited 6s for PostgreSQL to write a quarantine record") {
		t.Errorf("after 6 s: %q", p)
	}
	s.WaitOnPostgres("", time.Time{})
	if p := s.WaitingOnPostgres(); p != "" {
		t.Errorf("after the wait ended: %q", p)
	}
	s.SetSilentAfter(time.Second)
	s.WaitOnPostgres("store the position", time.Now().Add(-900*time.Millisecond))
	if p := s.WaitingOnPostgres(); p != "" {
		t.Errorf("0.9 s into a wait with a 1 s bound: %q, want none before 1 s", p)
	}
	s.WaitOnPostgres("store the position", time.Now().Add(-time.Minute))
	s.SetState(StateRestarting, nil)
	if p := s.WaitingOnPostgres(); p != "" {
		t.Errorf("after a restart: %q", p)
	}
}
