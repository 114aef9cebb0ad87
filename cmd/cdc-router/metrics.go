package main

import (
	"runtime"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/cdc-router/cdc-router/replication"
	"github.com/cdc-router/cdc-router/route"
)

// newRegistry is the registry /metrics serves for run: the process and Go runtime collectors,
// cdc_router_build_info, the stream's metrics (read from stats) and the broker's (route.Metrics, to pass to
// every Router the stream dials). It is the process's own registry, not Prometheus's global one.
func newRegistry(stats *replication.Stats) (*prometheus.Registry, *route.Metrics, error) {
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
	if err := stats.Register(reg); err != nil {
		return nil, nil, err
	}
	rm, err := route.NewMetrics(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, rm, nil
}
