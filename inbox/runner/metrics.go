package runner

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
)

// tableScrapeTimeout bounds the query that reads the parked and failed gauges at scrape time.
const tableScrapeTimeout = 5 * time.Second

// outcomeLabels are the values of cdc_router_inbox_events_total's outcome label: every Outcome, and "error" for a
// Process that returned an error (nothing committed, the delivery retried).
var outcomeLabels = []string{"applied", "duplicate", "stale", "parked", "conflict", "failed", "gap", "error"}

// runnerMetrics are a Runner's metrics. Each carries the constant label consumer, so the runners of
// several projections can share one registry. A nil *runnerMetrics records nothing.
type runnerMetrics struct {
	events       map[string]prometheus.Counter
	latency      prometheus.Observer
	redeliveries prometheus.Counter
	retries      prometheus.Counter
	partitions   prometheus.Gauge // a group's partitions this instance consumes; nil without a group
	members      prometheus.Gauge // the group's members it saw at its last rebalance
}

func newRunnerMetrics(reg prometheus.Registerer, p *inbox.Processor, log *slog.Logger, grouped bool) (*runnerMetrics, error) {
	if reg == nil {
		return nil, nil
	}
	labels := prometheus.Labels{"consumer": p.Config().Consumer}
	events := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdc_router_inbox_events_total", ConstLabels: labels,
		Help: "Events processed by outcome: applied, duplicate, stale, parked, conflict, failed, gap, or error (retried)."},
		[]string{"outcome"})
	latency := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cdc_router_inbox_apply_latency_seconds", ConstLabels: labels,
		Help:    "Time from the event's occurrence (the AMQP timestamp, whole seconds) to the commit of its projection write.",
		Buckets: []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900, 3600, 6 * 3600}})
	redeliveries := prometheus.NewCounter(prometheus.CounterOpts{Name: "cdc_router_inbox_redeliveries_total", ConstLabels: labels,
		Help: "Deliveries the broker marked as redelivered."})
	retries := prometheus.NewCounter(prometheus.CounterOpts{Name: "cdc_router_inbox_handler_retries_total", ConstLabels: labels,
		Help: "Retries scheduled after Process returned an error."})
	tables := newTableCollector(p, labels, log)
	m := &runnerMetrics{events: map[string]prometheus.Counter{}, latency: latency, redeliveries: redeliveries, retries: retries}
	for _, o := range outcomeLabels {
		m.events[o] = events.WithLabelValues(o)
	}
	collectors := []prometheus.Collector{events, latency, redeliveries, retries, tables}
	if grouped {
		m.partitions = prometheus.NewGauge(prometheus.GaugeOpts{Name: "cdc_router_inbox_group_partitions", ConstLabels: labels,
			Help: "Partitions of the consumer group this instance consumes (0 while it is not connected)."})
		m.members = prometheus.NewGauge(prometheus.GaugeOpts{Name: "cdc_router_inbox_group_members", ConstLabels: labels,
			Help: "Members of the consumer group this instance saw at its last rebalance."})
		collectors = append(collectors, m.partitions, m.members)
	}
	for _, c := range collectors {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("inbox runner metrics for consumer %q: %w (one Runner per consumer and registry)", p.Config().Consumer, err)
		}
	}
	return m, nil
}

// processed counts one Process call and, for an applied event with a timestamp, its apply latency.
func (m *runnerMetrics) processed(res inbox.Result, err error, occurred time.Time) {
	if m == nil {
		return
	}
	if err != nil {
		m.events["error"].Inc()
		return
	}
	if c, ok := m.events[res.Outcome.String()]; ok {
		c.Inc()
	}
	if res.Outcome == inbox.Applied && !occurred.IsZero() {
		m.latency.Observe(max(0, time.Since(occurred).Seconds()))
	}
}

func (m *runnerMetrics) received(d amqp.Delivery) {
	if m != nil && d.Redelivered {
		m.redeliveries.Inc()
	}
}

// rebalanced records a group instance's share after a rebalance (members 0: the session ended).
func (m *runnerMetrics) rebalanced(partitions, members int) {
	if m == nil || m.partitions == nil {
		return
	}
	m.partitions.Set(float64(partitions))
	if members > 0 {
		m.members.Set(float64(members))
	}
}

func (m *runnerMetrics) retried() {
	if m != nil {
		m.retries.Inc()
	}
}

// tableCollector reads the consumer's parked and failed counts from the inbox tables at scrape time
// (Processor.Backlog). When the query fails the gauges are left out of that scrape (and the failure
// logged) rather than failing the whole scrape.
type tableCollector struct {
	p                      *inbox.Processor
	log                    *slog.Logger
	parked, oldest, failed *prometheus.Desc
}

func newTableCollector(p *inbox.Processor, labels prometheus.Labels, log *slog.Logger) *tableCollector {
	return &tableCollector{p: p, log: log,
		parked: prometheus.NewDesc("cdc_router_inbox_parked_events", "Events waiting in the parked table for a gap to close.", nil, labels),
		oldest: prometheus.NewDesc("cdc_router_inbox_oldest_parked_age_seconds", "Age of the oldest parked event (0 when none).", nil, labels),
		failed: prometheus.NewDesc("cdc_router_inbox_failed_events", "Events in the failed table not yet retried or resolved.", nil, labels),
	}
}

// Describe sends the gauges' descriptions.
func (c *tableCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.parked
	ch <- c.oldest
	ch <- c.failed
}

// Collect reads the gauges in one read-only transaction.
func (c *tableCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), tableScrapeTimeout)
	defer cancel()
	b, err := c.p.Backlog(ctx)
	if err != nil {
		c.log.Warn("inbox metrics: reading the parked and failed tables failed", "error", err)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.parked, prometheus.GaugeValue, float64(b.Parked))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, b.OldestParked.Seconds())
	ch <- prometheus.MustNewConstMetric(c.failed, prometheus.GaugeValue, float64(b.Failed))
}
