package registry

import (
	"fmt"
	"os"
	"runtime/debug"
	"time"

	"github.com/cdc-router/cdc-router/metrics"
)

// Record is what one router process runs with and how it is doing, as kept in <schema>.routers.
type Record struct {
	Slot     string
	Instance string // host/pid/start time in unix seconds (InstanceOf): one per process
	Role     string // the router's state as package metrics names it (metrics.StateStreaming, …)

	Publication   string
	Tables        []string
	Mappings      map[string]string // qualified table -> the text of the mapping file it is read with
	MessagePrefix string
	Shard         string // "i/N", or "" unsharded
	Exchange      string
	Settings      map[string]string // the effective configuration, key -> value, secrets masked by the caller

	Version string
	Host    string
	PID     int

	StartedAt   time.Time
	HeartbeatAt time.Time  // the database's clock at the record's last write
	StoppedAt   *time.Time // nil while the process runs (or was last heard running)
	LastError   string     // the error that caused the last restart, as the router reports it

	// Publishing is what the process's publishing did at its last heartbeat; nil while it did not publish
	// (starting, standing by, stopped) or for a router older than migration 019, which does not record it.
	Publishing *Publishing
}

// Publishing is what a router's publishing does now, as its metrics say: its in-flight limit
// (cdc_router_window_limit, the sum over its lanes, adapted to the confirm round trip with
// --adaptive-window) and the events handed to the broker and not yet confirmed (cdc_router_inflight_events).
type Publishing struct {
	WindowLimit int
	InFlight    int
}

// State is what a running process reports of itself at each poll: its role, the error that caused its
// last restart, and its publishing (nil while it does not publish).
type State struct {
	Role       string
	Err        error
	Publishing *Publishing
}

// HeartbeatInterval is how often a running router refreshes its record.
const HeartbeatInterval = 10 * time.Second

// Stale is how long after its last heartbeat a record that did not stop no longer counts as live: three
// missed beats.
const Stale = 3 * HeartbeatInterval

// superseded is the heartbeat age after which a starting router deletes its slot's record of another
// process (as it does the slot's stopped records).
const superseded = 24 * time.Hour

// Live reports whether the record's process was heard from within Stale (3 × HeartbeatInterval) and has
// not stopped.
func (r Record) Live(now time.Time) bool {
	return r.StoppedAt == nil && !r.HeartbeatAt.IsZero() && now.Sub(r.HeartbeatAt) <= Stale
}

// Active reports whether the record's role holds the slot: streaming, or copying the initial snapshot.
func (r Record) Active() bool {
	return r.Role == metrics.StateStreaming || r.Role == metrics.StateSnapshot
}

// InstanceOf is the Instance of the process with that host, pid and start time: host/pid/unix seconds.
func InstanceOf(host string, pid int, started time.Time) string {
	return fmt.Sprintf("%s/%d/%d", host, pid, started.Unix())
}

// withProcess fills what the caller left empty with this process's own: host, pid, start time (now),
// version (the module's, from the build) and Instance.
func (r Record) withProcess(now time.Time) Record {
	if r.Host == "" {
		r.Host, _ = os.Hostname()
	}
	if r.PID == 0 {
		r.PID = os.Getpid()
	}
	if r.StartedAt.IsZero() {
		r.StartedAt = now
	}
	if r.Version == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			r.Version = bi.Main.Version
		}
	}
	if r.Instance == "" {
		r.Instance = InstanceOf(r.Host, r.PID, r.StartedAt)
	}
	if r.Tables == nil {
		r.Tables = []string{}
	}
	return r
}

// Speaker is the record among recs that speaks for slot: a live one (Live at now), preferring one that
// holds the slot (Active), else the most recently started; ok is false when slot has none.
func Speaker(recs []Record, slot string, now time.Time) (rec Record, ok bool) {
	rank := func(r Record) int {
		switch {
		case r.Live(now) && r.Active():
			return 2
		case r.Live(now):
			return 1
		}
		return 0
	}
	for _, r := range recs {
		if r.Slot != slot {
			continue
		}
		if !ok || rank(r) > rank(rec) || (rank(r) == rank(rec) && r.StartedAt.After(rec.StartedAt)) {
			rec, ok = r, true
		}
	}
	return rec, ok
}
