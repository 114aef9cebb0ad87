package metrics

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers the stream's metrics with reg: a collector that reads Stats at scrape time (counters,
// the state enum, lag, the slot's health) and the commit-to-confirm histogram. docs/reference.md#metrics
// describes each metric.
func (s *Stats) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{statsCollector{s}, s.histogram()} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("replication metrics: %w", err)
		}
	}
	return nil
}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

var (
	publishedDesc = desc("cdc_router_events_published_total",
		"Events the broker confirmed, by source: stream (the slot), snapshot (the initial snapshot run by this process).", "source")
	quarantinedDesc = desc("cdc_router_events_quarantined_total",
		"Rows and events written to the quarantine table instead of being published, by reason class: row (cannot become an event), "+
			"unpublishable (RabbitMQ would refuse the message), refused (RabbitMQ refused it repeatedly).", "reason")
	restartsDesc = desc("cdc_router_stream_restarts_total",
		"In-process stream restarts from the acknowledged position after a failure, by cause: broker, postgres, other.", "cause")
	stateDesc = desc("cdc_router_state",
		"1 for the router's current state (starting, snapshot, streaming, standby, restarting, stopped), 0 for the others.", "state")
	ackedDesc = desc("cdc_router_acknowledged_lsn_bytes",
		"Last position (LSN) acknowledged to PostgreSQL, as a byte offset into the WAL.")
	lagSecondsDesc = desc("cdc_router_replication_lag_seconds",
		"Age of the commit of the oldest received transaction whose events are not all confirmed and acknowledged; 0 when every received transaction is acknowledged (an idle database is not lag).")
	lagBytesDesc = desc("cdc_router_replication_lag_bytes",
		"The server's WAL end (from the stream's last keepalive or data) minus the acknowledged position.")
	oldestDesc = desc("cdc_router_oldest_unconfirmed_event_age_seconds",
		"How long the oldest event handed to the broker connection by the stream has waited for its confirm; 0 when none waits.")
	snapDoneDesc = desc("cdc_router_snapshot_rows_done",
		"Rows of the initial snapshot confirmed (including those of an earlier process, on resumption); 0 when none ran.")
	snapExpectedDesc = desc("cdc_router_snapshot_rows_expected",
		"Rows the initial snapshot copies in all, counted at its start; 0 when none ran.")
	slotActiveDesc = desc("cdc_router_slot_active",
		"1 while a walsender streams from the slot (pg_replication_slots.active), from the last slot health read.")
	slotWALStatusDesc = desc("cdc_router_slot_wal_status",
		"1 for the slot's wal_status (reserved, extended, unreserved, lost), 0 for the others, from the last slot health read.", "wal_status")
	slotSafeDesc = desc("cdc_router_slot_safe_wal_size_bytes",
		"WAL that can still be written before PostgreSQL invalidates the slot (safe_wal_size); absent when max_slot_wal_keep_size is -1 (no limit).")
	slotRetainedDesc = desc("cdc_router_slot_retained_wal_bytes",
		"WAL kept on disk for the slot: pg_current_wal_lsn() minus its restart_lsn.")
	slotKeepDesc = desc("cdc_router_slot_max_wal_keep_size_bytes",
		"PostgreSQL's max_slot_wal_keep_size in bytes; absent when -1 (no limit).")
	slotCheckedDesc = desc("cdc_router_slot_health_checked_timestamp_seconds",
		"Unix time of the last successful slot health read (every 15 s while streaming).")
)

var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// statsCollector reads a Stats at scrape time. The slot's health is exported only while a read is held
// (the streaming router's; a standby exports none, so only one router reports the slot).
type statsCollector struct{ s *Stats }

func (c statsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{publishedDesc, quarantinedDesc, restartsDesc, stateDesc, ackedDesc, lagSecondsDesc,
		lagBytesDesc, oldestDesc, snapDoneDesc, snapExpectedDesc, slotActiveDesc, slotWALStatusDesc, slotSafeDesc,
		slotRetainedDesc, slotKeepDesc, slotCheckedDesc} {
		ch <- d
	}
}

func (c statsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, t, v, labels...)
	}
	metric(publishedDesc, prometheus.CounterValue, float64(s.published.Load()), "stream")
	metric(publishedDesc, prometheus.CounterValue, float64(s.snapPublished.Load()), "snapshot")
	for i, class := range quarantineClasses {
		metric(quarantinedDesc, prometheus.CounterValue, float64(s.quarByClass[i].Load()), class)
	}
	for i, cause := range restartCauses {
		metric(restartsDesc, prometheus.CounterValue, float64(s.restartCause[i].Load()), cause)
	}
	state, _, _ := s.State()
	for _, st := range states {
		metric(stateDesc, prometheus.GaugeValue, oneIf(st == state), st)
	}
	metric(ackedDesc, prometheus.GaugeValue, float64(s.acked.Load()))
	metric(lagSecondsDesc, prometheus.GaugeValue, s.Lag().Seconds())
	if lag, ok := s.LagBytes(); ok {
		metric(lagBytesDesc, prometheus.GaugeValue, float64(lag))
	}
	metric(oldestDesc, prometheus.GaugeValue, s.OldestUnconfirmed().Seconds())
	done, total := s.Snapshot()
	metric(snapDoneDesc, prometheus.GaugeValue, float64(done))
	metric(snapExpectedDesc, prometheus.GaugeValue, float64(total))
	h := s.Slot()
	if h.Checked.IsZero() {
		return
	}
	metric(slotActiveDesc, prometheus.GaugeValue, oneIf(h.Active))
	for _, st := range walStatuses {
		metric(slotWALStatusDesc, prometheus.GaugeValue, oneIf(st == h.WALStatus), st)
	}
	if h.SafeWALKnown {
		metric(slotSafeDesc, prometheus.GaugeValue, float64(h.SafeWALBytes))
	}
	metric(slotRetainedDesc, prometheus.GaugeValue, float64(h.RetainedBytes))
	if h.MaxKeepBytes >= 0 {
		metric(slotKeepDesc, prometheus.GaugeValue, float64(h.MaxKeepBytes))
	}
	metric(slotCheckedDesc, prometheus.GaugeValue, float64(h.Checked.UnixNano())/float64(time.Second))
}

func oneIf(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
