package metrics

import (
	"strings"
	"testing"
	"time"
)

// TestLagGrowsWhileTheWalsenderIsSilent: a router that has heard nothing from the walsender for longer than
// --pg-timeout (a healthy one answers the stream's ping within it) shows the time since it last did as its
// lag, also with every received transaction acknowledged; a shorter silence, a router that never streamed,
// and one in standby show none.
func TestLagGrowsWhileTheWalsenderIsSilent(t *testing.T) {
	s := &Stats{}
	s.silentAfter.Store(int64(10 * time.Second))
	if lag := s.Lag(); lag != 0 {
		t.Errorf("lag %v before the first stream, want 0", lag)
	}
	s.heard.Store(time.Now().Add(-5 * time.Second).UnixNano())
	if lag := s.Lag(); lag != 0 {
		t.Errorf("lag %v after 5 s of silence under a 10 s bound, want 0", lag)
	}
	s.heard.Store(time.Now().Add(-time.Minute).UnixNano())
	if lag := s.Lag(); lag < time.Minute || lag > time.Minute+time.Second {
		t.Errorf("lag %v after a minute of silence, want about 1m", lag)
	}
	s.oldestPending.Store(time.Now().Add(-2 * time.Minute).UnixNano()) // the older of the two wins
	if lag := s.Lag(); lag < 2*time.Minute || lag > 2*time.Minute+time.Second {
		t.Errorf("lag %v with a 2 min old unacknowledged commit, want about 2m", lag)
	}
	s.oldestPending.Store(0)
	s.SetState(StateStandby, nil)
	if lag := s.Lag(); lag != 0 {
		t.Errorf("lag %v in standby, want 0", lag)
	}
}

// TestWaitingSaysWhatTheRouterWaitsFor: while starting or restarting, Waiting names the current wait and
// how long it lasts; once the router streams it is empty.
func TestWaitingSaysWhatTheRouterWaitsFor(t *testing.T) {
	s := &Stats{}
	s.SetState(StateStarting, nil)
	s.WaitFor("PostgreSQL at db:5432 to accept the router's ordinary connection")
	if w := s.Waiting(); !strings.HasPrefix(w, "waiting 0s for PostgreSQL at db:5432") {
		t.Errorf("waiting %q", w)
	}
	// The same wait told in more detail keeps its start; another wait starts anew.
	slot := "PostgreSQL to create replication slot s (it waits until the transactions running when it began end)"
	s.WaitFor(slot)
	s.mu.Lock()
	s.waitingSince = s.waitingSince.Add(-time.Minute)
	s.mu.Unlock()
	s.WaitFor(slot + ": 1 transaction(s) still run: pid 42")
	if w := s.Waiting(); !strings.HasPrefix(w, "waiting 1m0s for "+slot+": 1 transaction(s)") {
		t.Errorf("waiting %q, want the creation's wait of 1m0s with its transactions", w)
	}
	s.WaitFor(slot + ": 2 transaction(s) still run: pid 42, pid 43")
	if w := s.Waiting(); !strings.HasPrefix(w, "waiting 1m0s for "+slot+": 2 transaction(s)") {
		t.Errorf("waiting %q, want the creation's wait of 1m0s with its transactions", w)
	}
	s.WaitFor("RabbitMQ to accept the router's connection")
	if w := s.Waiting(); w != "waiting 0s for RabbitMQ to accept the router's connection" {
		t.Errorf("waiting %q, want a new wait", w)
	}
	s.SetState(StateStreaming, nil)
	if w := s.Waiting(); w != "" {
		t.Errorf("waiting %q while streaming, want none", w)
	}
	s.SetState(StateRestarting, nil)
	if w := s.Waiting(); w != "" {
		t.Errorf("waiting %q after streaming, before the next wait is known, want none", w)
	}
}
