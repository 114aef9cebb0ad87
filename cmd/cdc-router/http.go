package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/cdc-router/cdc-router/replication"
)

// health is the JSON body of /healthz and /readyz.
type health struct {
	State             string `json:"state"`
	Since             string `json:"since"`
	AcknowledgedLSN   string `json:"acknowledged_lsn"`
	Published         int64  `json:"published"`
	Quarantined       int64  `json:"quarantined"`
	Restarts          int64  `json:"restarts"`
	SnapshotRowsDone  int64  `json:"snapshot_rows_done,omitempty"`
	SnapshotRowsTotal int64  `json:"snapshot_rows_total,omitempty"`
	LastError         string `json:"last_error,omitempty"`
	Problem           string `json:"problem,omitempty"`
}

func healthOf(s *replication.Stats) health {
	state, since, lastErr := s.State()
	done, total := s.Snapshot()
	return health{State: state, Since: since.UTC().Format(time.RFC3339), AcknowledgedLSN: s.Acknowledged().String(),
		Published: s.Published(), Quarantined: s.Quarantined(), Restarts: s.Restarts(),
		SnapshotRowsDone: done, SnapshotRowsTotal: total, LastError: lastErr, Problem: s.Problem()}
}

// handler serves /healthz (the process is alive), /readyz and /metrics (Prometheus text format).
//
// /readyz answers 200 while streaming or copying the initial snapshot (work in progress, not a stall) and
// in standby (another router holds the slot and this one takes over when it is free: a healthy spare, so
// that a rolling update gated on readiness can finish with two routers); 503 while starting or
// restarting, and while the publication no longer carries the outbox, so new rows are not streamed.
// /readyz?active=1 answers 503 in standby too, for a probe or a Service that wants only the router that
// holds the slot.
func handler(s *replication.Stats) http.Handler {
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, code int) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(healthOf(s))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { write(w, http.StatusOK) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		activeOnly := r.URL.Query().Get("active") == "1"
		switch state, _, _ := s.State(); {
		case s.Problem() != "":
			write(w, http.StatusServiceUnavailable)
		case state == replication.StateStreaming, state == replication.StateSnapshot:
			write(w, http.StatusOK)
		case state == replication.StateStandby && !activeOnly:
			write(w, http.StatusOK)
		default:
			write(w, http.StatusServiceUnavailable)
		}
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		h := healthOf(s)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		metric := func(name, kind, help string, v any) {
			fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n%s %v\n", name, help, name, kind, name, v)
		}
		metric("cdc_router_events_published_total", "counter", "Streamed events confirmed by the broker.", h.Published)
		metric("cdc_router_rows_quarantined_total", "counter", "Streamed rows written to the quarantine table.", h.Quarantined)
		metric("cdc_router_stream_restarts_total", "counter", "In-process stream restarts after a failure.", h.Restarts)
		metric("cdc_router_acknowledged_lsn_bytes", "gauge", "Last position acknowledged to PostgreSQL, as a byte offset.", uint64(s.Acknowledged()))
		metric("cdc_router_snapshot_rows_done", "gauge", "Rows of the initial snapshot confirmed.", h.SnapshotRowsDone)
		metric("cdc_router_snapshot_rows_total", "gauge", "Rows of the initial snapshot in all.", h.SnapshotRowsTotal)
		streaming := 0
		if h.State == replication.StateStreaming {
			streaming = 1
		}
		metric("cdc_router_streaming", "gauge", "1 while the slot is being streamed.", streaming)
		standby := 0
		if h.State == replication.StateStandby {
			standby = 1
		}
		metric("cdc_router_standby", "gauge", "1 while another router holds the slot and this one stands by.", standby)
	})
	return mux
}

// serveHTTP serves the endpoints on addr until ctx ends. An address that cannot be bound is an error.
func serveHTTP(ctx context.Context, addr string, s *replication.Stats, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: handler(s), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shut, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		srv.Shutdown(shut)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http endpoint stopped", "error", err)
		}
	}()
	log.Info("serving /healthz, /readyz and /metrics", "addr", ln.Addr().String())
	return nil
}
