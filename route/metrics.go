package route

import (
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics is what the Routers of a process report to Prometheus: the broker's nacks and returns, the
// confirm round trip, and, read at scrape time from the Routers that are open, the events and bytes in
// flight, the age of the oldest unconfirmed write and whether RabbitMQ blocks the connection
// (connection.blocked). One Metrics serves every Router dialled with it in Config.Metrics (the stream dials
// one per run), so its counters survive reconnects. A nil *Metrics records nothing.
type Metrics struct {
	nacks   prometheus.Counter
	returns prometheus.Counter
	confirm prometheus.Histogram

	mu   sync.Mutex
	open map[*Router]struct{}
}

// NewMetrics registers the route metrics (cdc_router_broker_*, cdc_router_confirm_round_trip_seconds,
// cdc_router_inflight_*, cdc_router_oldest_unconfirmed_write_age_seconds) with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		nacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "cdc_router_broker_nacks_total",
			Help: "Messages the broker confirmed negatively (basic.nack); each restarts the stream from the acknowledged position."}),
		returns: prometheus.NewCounter(prometheus.CounterOpts{Name: "cdc_router_broker_returns_total",
			Help: "Messages the broker returned as unroutable (basic.return, without an alternate exchange); each restarts the stream."}),
		confirm: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "cdc_router_confirm_round_trip_seconds",
			Help:    "Time from writing a message to the broker to its publisher confirm (positive or negative).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)}),
		open: map[*Router]struct{}{},
	}
	gauge := func(name, help string, read func(r *Router) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return m.sum(read) })
	}
	for _, c := range []prometheus.Collector{m.nacks, m.returns, m.confirm,
		gauge("cdc_router_inflight_events", "Events handed to the broker connection and not yet confirmed (written or held behind an earlier event of their aggregate).",
			func(r *Router) float64 { r.idleMu.Lock(); defer r.idleMu.Unlock(); return float64(r.inflight) }),
		gauge("cdc_router_window_limit", "Messages the router's channels may have unconfirmed now, summed over its lanes: --lanes × --window, or with --adaptive-window each lane's limit adapted to the confirm round trip below --window.",
			func(r *Router) float64 { return float64(r.WindowLimit()) }),
		gauge("cdc_router_inflight_bytes", "Bytes (body and content header) of the unconfirmed messages, bounded by --max-inflight-bytes.",
			func(r *Router) float64 { used, _ := r.bytes.usage(); return float64(used) }),
		gauge("cdc_router_broker_blocked", "1 while RabbitMQ blocks the router's connection (connection.blocked: a memory or disk alarm), else 0.",
			func(r *Router) float64 {
				if r.blocked.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "cdc_router_oldest_unconfirmed_write_age_seconds",
			Help: "How long the oldest message written to the broker has waited for its confirm (not events held behind their aggregate or queued unwritten); 0 when none waits."},
			func() float64 { return m.Unconfirmed().Seconds() }),
	} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("route metrics: %w", err)
		}
	}
	return m, nil
}

// sum adds read over the open Routers.
func (m *Metrics) sum(read func(r *Router) float64) float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	var v float64
	for r := range m.open {
		v += read(r)
	}
	return v
}

// Publishing returns what the open Routers' publishing does now, summed as the gauges sum it: the in-flight
// limit (cdc_router_window_limit) and the events handed to the broker and not yet confirmed
// (cdc_router_inflight_events); ok is false when no Router is open (nothing publishes).
func (m *Metrics) Publishing() (limit, inflight int, ok bool) {
	if m == nil {
		return 0, 0, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for r := range m.open {
		limit += r.WindowLimit()
		r.idleMu.Lock()
		inflight += r.inflight
		r.idleMu.Unlock()
		ok = true
	}
	return limit, inflight, ok
}

// opened and closed keep the set of Routers the gauges read.
func (m *Metrics) opened(r *Router) {
	if m != nil {
		m.mu.Lock()
		m.open[r] = struct{}{}
		m.mu.Unlock()
	}
}

func (m *Metrics) closed(r *Router) {
	if m != nil {
		m.mu.Lock()
		delete(m.open, r)
		m.mu.Unlock()
	}
}

// confirmed records one confirm's round trip.
func (m *Metrics) confirmed(rtt time.Duration) {
	if m != nil {
		m.confirm.Observe(rtt.Seconds())
	}
}

func (m *Metrics) nacked() {
	if m != nil {
		m.nacks.Inc()
	}
}

func (m *Metrics) returned() {
	if m != nil {
		m.returns.Inc()
	}
}

// Blocking is RabbitMQ's block of a Router's connection (connection.blocked): the broker's reason (a memory
// or disk alarm) and when it began.
type Blocking struct {
	Reason string
	Since  time.Time
}

// Blocked returns the oldest block of the open Routers' connections, if RabbitMQ blocks any: while it does,
// nothing is published (the broker stops reading), so the stream makes no progress, for as long as the
// broker's alarm lasts.
func (m *Metrics) Blocked() (Blocking, bool) {
	if m == nil {
		return Blocking{}, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var oldest *Blocking
	for r := range m.open {
		if b := r.block.Load(); b != nil && (oldest == nil || b.Since.Before(oldest.Since)) {
			oldest = b
		}
	}
	if oldest == nil {
		return Blocking{}, false
	}
	return *oldest, true
}

// Unconfirmed returns how long the oldest message written to RabbitMQ on the open Routers' lanes has waited
// for its confirm, 0 when none waits. Only written messages count: an event held behind its aggregate or
// queued in its lane waits on the router, not on the broker. Past UnconfirmedBound the broker takes
// publishes and confirms none (a stuck quorum queue, a cluster without its majority), and nothing is
// acknowledged until it does or the Router's ConfirmTimeout fails it.
func (m *Metrics) Unconfirmed() time.Duration {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var oldest time.Duration
	for r := range m.open {
		if p, _ := r.oldestWrite(); p != nil {
			oldest = max(oldest, time.Since(p.sent))
		}
	}
	return oldest
}
