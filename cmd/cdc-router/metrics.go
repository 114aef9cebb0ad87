package main

import (
	"context"
	"net/http"
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/route"
	"github.com/cdc-router/cdc-router/snapshot"
)

// newRegistry is the registry /metrics serves for run: the process and Go runtime collectors,
// cdc_router_build_info, the stream's metrics (read from stats) and the broker's (route.Metrics, to pass to
// every Router the stream dials). It is the process's own registry, not Prometheus's global one.
func newRegistry(stats *metrics.Stats) (*prometheus.Registry, *route.Metrics, error) {
	reg, rm, err := baseRegistry()
	if err != nil {
		return nil, nil, err
	}
	if err := stats.Register(reg); err != nil {
		return nil, nil, err
	}
	return reg, rm, nil
}

// baseRegistry has what every command that publishes exports: build_info, the process and Go collectors
// and the route metrics.
func baseRegistry() (*prometheus.Registry, *route.Metrics, error) {
	reg := prometheus.NewRegistry()
	build := prometheus.NewGauge(prometheus.GaugeOpts{Name: "cdc_router_build_info",
		Help:        "Always 1; the labels say which build of cdc-router runs.",
		ConstLabels: prometheus.Labels{"version": version, "goversion": runtime.Version()}})
	build.Set(1)
	for _, c := range []prometheus.Collector{build, collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, nil, err
		}
	}
	rm, err := route.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, rm, nil
}

// backfillMetrics is the registry of a backfill with --http-addr, and the publisher wrapper that counts
// its confirmed rows as cdc_router_events_published_total{source="backfill"}.
func backfillMetrics() (*prometheus.Registry, *route.Metrics, func(snapshot.Publisher) snapshot.Publisher, error) {
	reg, rm, err := baseRegistry()
	if err != nil {
		return nil, nil, nil, err
	}
	published := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "cdc_router_events_published_total",
		Help: "Events the broker confirmed, by source: backfill (the rows this backfill process published)."}, []string{"source"})
	if err := reg.Register(published); err != nil {
		return nil, nil, nil, err
	}
	counter := published.WithLabelValues("backfill")
	return reg, rm, func(p snapshot.Publisher) snapshot.Publisher { return countedPublisher{p, counter} }, nil
}

// countedPublisher counts the events its Publisher's broker confirmed.
type countedPublisher struct {
	snapshot.Publisher
	confirmed prometheus.Counter
}

func (p countedPublisher) Publish(ctx context.Context, ev cdc.Event, done func()) error {
	return p.Publisher.Publish(ctx, ev, func() {
		p.confirmed.Inc()
		if done != nil {
			done()
		}
	})
}

// metricsOnly serves /metrics of gather and a /healthz that answers 200 while the process runs (backfill).
func metricsOnly(gather prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}
