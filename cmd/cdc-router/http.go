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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cdc-router/cdc-router/admin"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/route"
)

// health is the JSON body of /healthz and /readyz.
type health struct {
	State             string  `json:"state"`
	Since             string  `json:"since"`
	AcknowledgedLSN   string  `json:"acknowledged_lsn"`
	Published         int64   `json:"published"`
	Quarantined       int64   `json:"quarantined"`
	Restarts          int64   `json:"restarts"`
	LagSeconds        float64 `json:"lag_seconds"`
	SnapshotRowsDone  int64   `json:"snapshot_rows_done,omitempty"`
	SnapshotRowsTotal int64   `json:"snapshot_rows_total,omitempty"`
	LastError         string  `json:"last_error,omitempty"`        // the error of the restart under way
	PreviousError     string  `json:"previous_error,omitempty"`    // the last restart's, once the router works again
	PreviousErrorAt   string  `json:"previous_error_at,omitempty"` // when it happened
	Problem           string  `json:"problem,omitempty"`
}

// healthOf is the body of /healthz and /readyz. The error of the last restart is last_error until the
// router streams, copies or stands by again; from then on it is previous_error, with its time, so that a
// router that recovered does not read as failing.
func healthOf(s *metrics.Stats, slotProblem string) health {
	state, since, _ := s.State()
	lastErr, errAt := s.LastError()
	done, total := s.Snapshot()
	problem := s.Problem()
	if problem == "" {
		problem = slotProblem
	}
	if problem == "" {
		problem = s.Unanswered() // streaming, but PostgreSQL may have gone silent
	}
	if problem == "" {
		problem = s.WaitingOnPostgres() // or the stream waits on its ordinary connection
	}
	if problem == "" {
		problem = s.Waiting() // starting or restarting: what it waits for
	}
	h := health{State: state, Since: since.UTC().Format(time.RFC3339), AcknowledgedLSN: s.Acknowledged().String(),
		Published: s.Published(), Quarantined: s.Quarantined(), Restarts: s.Restarts(), LagSeconds: s.Lag().Seconds(),
		SnapshotRowsDone: done, SnapshotRowsTotal: total, LastError: lastErr, Problem: problem}
	switch state {
	case metrics.StateStreaming, metrics.StateSnapshot, metrics.StateStandby:
		if lastErr != "" {
			h.LastError, h.PreviousError, h.PreviousErrorAt = "", lastErr, errAt.UTC().Format(time.RFC3339)
		}
	}
	return h
}

// slotProblem is what makes the slot's health a reason to be unready: the slot is invalidated, or its
// safe_wal_size (the WAL left before PostgreSQL invalidates it) is below minSafe. minSafe 0 means a tenth
// of max_slot_wal_keep_size; a negative minSafe turns the size check off. Without a limit
// (max_slot_wal_keep_size = -1) PostgreSQL never invalidates the slot and there is nothing to check.
func slotProblem(h pgserver.SlotHealth, minSafe int64) string {
	if h.WALStatus == "lost" {
		return "the replication slot is invalidated (wal_status lost): events were lost; see docs/howto/respond-to-alerts.md#cdcrouterslotinvalidated"
	}
	if minSafe == 0 && h.MaxKeepBytes > 0 {
		minSafe = h.MaxKeepBytes / 10
	}
	if !h.SafeWALKnown || minSafe <= 0 || h.SafeWALBytes >= minSafe {
		return ""
	}
	return fmt.Sprintf("the replication slot is %s from invalidation (safe_wal_size, below --min-safe-wal-bytes %s): "+
		"the router falls behind; see docs/howto/respond-to-alerts.md#cdcrouterslotnearinvalidation", admin.HumanBytes(max(h.SafeWALBytes, 0)), admin.HumanBytes(minSafe))
}

// handler serves /healthz (the process is alive), /readyz and /metrics (Prometheus exposition of gather).
//
// /readyz answers 200 while streaming or copying the initial snapshot (work in progress, not a stall) and
// in standby (another router holds the slot and this one takes over when it is free: a healthy spare, so
// that a rolling update gated on readiness can finish with two routers); 503 while starting or
// restarting (problem then says what the router waits for: a connection, the start-up checks, the slot's
// creation and the transactions it waits for, or the restart backoff), while the publication no longer carries the outbox, so new rows are not streamed, and while
// the slot is near invalidation (slotProblem with minSafe), and while RabbitMQ blocks the router's
// connection (broker: a memory or disk alarm; nothing is published until it clears), and while PostgreSQL has not
// answered the stream's request for a reply (metrics.Stats.Unanswered) or a wait of the stream on its ordinary
// connection lasts (metrics.Stats.WaitingOnPostgres), and while RabbitMQ has not confirmed a message written
// to it for route.UnconfirmedBound (unconfirmed). /readyz?active=1 answers 503 in standby too,
// for a probe or a Service that wants only the router that holds the slot.
func handler(s *metrics.Stats, gather prometheus.Gatherer, minSafe int64, broker func() string) http.Handler {
	if broker == nil {
		broker = func() string { return "" }
	}
	problem := func() string {
		if p := slotProblem(s.Slot(), minSafe); p != "" {
			return p
		}
		return broker()
	}
	mux := http.NewServeMux()
	write := func(w http.ResponseWriter, code int, h health) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		json.NewEncoder(w).Encode(h)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		write(w, http.StatusOK, healthOf(s, problem()))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		activeOnly := r.URL.Query().Get("active") == "1"
		h := healthOf(s, problem())
		switch state := h.State; {
		case h.Problem != "":
			write(w, http.StatusServiceUnavailable, h)
		case state == metrics.StateStreaming, state == metrics.StateSnapshot:
			write(w, http.StatusOK, h)
		case state == metrics.StateStandby && !activeOnly:
			write(w, http.StatusOK, h)
		default:
			write(w, http.StatusServiceUnavailable, h)
		}
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(gather, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	return mux
}

// serveHTTP serves h on addr until ctx ends; paths names its endpoints in the log line. An address that
// cannot be bound is an error.
func serveHTTP(ctx context.Context, addr string, h http.Handler, paths string, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--http-addr %s: %w", addr, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
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
	log.Info("serving "+paths, "addr", ln.Addr().String())
	return nil
}

// brokerBlocked is the readiness problem of a connection RabbitMQ blocks (route.Metrics.Blocked), or "".
func brokerBlocked(m *route.Metrics) func() string {
	return func() string {
		b, ok := m.Blocked()
		if !ok {
			return ""
		}
		return fmt.Sprintf("RabbitMQ blocks the router's connection (connection.blocked: %s) for %s: nothing is published until "+
			"the broker's memory or disk alarm clears; see docs/howto/broker-refusals-and-alarms.md#broker-alarms", b.Reason, time.Since(b.Since).Round(time.Second))
	}
}

// brokerProblem is the readiness problem of RabbitMQ (route.Metrics), or "": a block of the router's
// connection (brokerBlocked), else a written message it has not confirmed for route.UnconfirmedBound.
func brokerProblem(m *route.Metrics) func() string {
	blocked := brokerBlocked(m)
	return func() string {
		if p := blocked(); p != "" {
			return p
		}
		return unconfirmed(m.Unconfirmed())
	}
}

// unconfirmed is the readiness problem of a broker that has not confirmed the oldest message written to it
// for age (route.Metrics.Unconfirmed), or "" below route.UnconfirmedBound: it takes publishes and confirms
// none. Seed 8100 of the harness: such a broker left /readyz at 200 for 400 s, between the restarts at each
// --confirm-timeout. Events held behind their aggregate are not written and do not count (seed 8123).
func unconfirmed(age time.Duration) string {
	if age < route.UnconfirmedBound {
		return ""
	}
	return fmt.Sprintf("RabbitMQ has not confirmed the oldest message the router wrote to it for %s (a stuck quorum queue, a cluster "+
		"without its majority, or a node that takes publishes and confirms none?): nothing is acknowledged meanwhile, and the "+
		"stream restarts once --confirm-timeout has passed; see docs/howto/broker-refusals-and-alarms.md#broker-alarms", age.Round(time.Second))
}
