package route

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
)

// TestMetrics: one Metrics serves the Routers dialled with it. Confirms fill the round-trip histogram; a
// nack and a return are counted; while a stalled connection holds messages unconfirmed, the in-flight
// gauges show them, and they go back to 0 once the Router is closed.
func TestMetrics(t *testing.T) {
	b := newBroker(t)
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("a second NewMetrics on one registry: no error")
	}
	gauge := func(name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	histogramCount := func() uint64 {
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() == "cdc_router_confirm_round_trip_seconds" {
				return mf.GetMetric()[0].GetHistogram().GetSampleCount()
			}
		}
		return 0
	}

	// Confirms.
	cfg := b.config("")
	cfg.Metrics = m
	r := b.dial(cfg)
	c := newCounter()
	publishAll(t, r, c, event("ok", "1", 1), event("ok", "2", 2), event("ok", "3", 3))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if n := histogramCount(); n != 3 {
		t.Errorf("confirm round trips observed: %d, want 3", n)
	}
	r.Close()

	// A return (no alternate exchange, nothing bound).
	b = newBroker(t)
	cfg = b.config("")
	cfg.Metrics, cfg.NoAlternateExchange, cfg.Lanes = m, true, 1
	r = b.dial(cfg)
	publishAll(t, r, c, event("nowhere", "1", 1))
	waitFailed(t, r, 10*time.Second)
	r.Close()
	if v := testutil.ToFloat64(m.returns); v != 1 {
		t.Errorf("cdc_router_broker_returns_total = %v, want 1", v)
	}

	// A nack.
	b = newBroker(t)
	cfg = b.config("")
	cfg.Metrics, cfg.Lanes = m, 1
	r = b.dial(cfg)
	b.queue("#", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	publishAll(t, r, c, event("full", "1", 1), event("full", "1", 2))
	waitFailed(t, r, 10*time.Second)
	r.Close()
	if v := testutil.ToFloat64(m.nacks); v != 1 {
		t.Errorf("cdc_router_broker_nacks_total = %v, want 1", v)
	}

	// In flight through a stalled connection, then closed.
	b = newBroker(t)
	p := b.proxy()
	cfg = b.config(b.viaProxy(p))
	cfg.Metrics = m
	r = b.dial(cfg)
	p.Pause()
	publishAll(t, r, c, event("stall", "1", 1), event("stall", "2", 2))
	r.blocked.Store(true) // as the connection's watcher does on connection.blocked (a broker-wide alarm to provoke)
	if v := gauge("cdc_router_broker_blocked"); v != 1 {
		t.Errorf("cdc_router_broker_blocked = %v while blocked, want 1", v)
	}
	if v := gauge("cdc_router_inflight_events"); v != 2 {
		t.Errorf("cdc_router_inflight_events = %v while the connection stalls, want 2", v)
	}
	if v := gauge("cdc_router_inflight_bytes"); v <= 0 {
		t.Errorf("cdc_router_inflight_bytes = %v while the connection stalls, want > 0", v)
	}
	if v := gauge("cdc_router_window_limit"); v != DefaultLanes*DefaultWindow {
		t.Errorf("cdc_router_window_limit = %v with a fixed window, want lanes × window = %d", v, DefaultLanes*DefaultWindow)
	}
	p.Cut()
	r.Close()
	if v, w := gauge("cdc_router_inflight_events"), gauge("cdc_router_inflight_bytes"); v != 0 || w != 0 {
		t.Errorf("in flight after Close: %v events, %v bytes; want 0", v, w)
	}
	if v := gauge("cdc_router_broker_blocked"); v != 0 {
		t.Errorf("cdc_router_broker_blocked = %v, want 0", v)
	}
}
