package initial

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// TestProbeTellsSilenceFromAnAnswer: the copy's watchdog ends a copy for a server it cannot reach (no
// answer within the bound, or nothing listening: the copy's own connection may be half-open and wait
// forever); one that answers, even with a refusal, leaves the copy alone.
func TestProbeTellsSilenceFromAnAnswer(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts TCP, never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	refused := closed.Addr().String()
	closed.Close()
	healthy := pg.NewDatabase(t)
	wrongPassword := fmt.Sprintf("postgres://no_such_role:x@127.0.0.1:%d/postgres?sslmode=disable", pg.Port)

	cases := []struct {
		name, url  string
		wantSilent bool
	}{
		{"healthy", healthy, false},
		{"a refusal is an answer", wrongPassword, false},
		{"nothing listening", "postgres://u@" + refused + "/db?sslmode=disable", true},
		{"accepts TCP, never answers", "postgres://u@" + silent.Addr().String() + "/db?sslmode=disable", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{PGURL: tc.url, PGTimeout: time.Second}
			began := time.Now()
			err := cfg.probe(context.Background())
			var r *pgserver.Retryable
			if got := errors.As(err, &r); got != tc.wantSilent {
				t.Fatalf("probe = %v, want silent: %v", err, tc.wantSilent)
			}
			if took := time.Since(began); took > 3*time.Second {
				t.Errorf("probe took %v with a bound of 1s", took)
			}
		})
	}

	t.Run("watch ends the copy with the probe's error", func(t *testing.T) {
		cfg := Config{PGURL: "postgres://u@" + silent.Addr().String() + "/db?sslmode=disable", PGTimeout: time.Second}
		ctx, end := cfg.watch(context.Background())
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("the watch did not end the copy's context within 5 s of a silent server (bound 1s)")
		}
		var r *pgserver.Retryable
		if err := end(ctx.Err()); !errors.As(err, &r) {
			t.Fatalf("end = %v, want the probe's pgserver.Retryable", err)
		}
	})
	t.Run("readiness is told of each probe's wait", func(t *testing.T) {
		// Seed 8106: with --pg-timeout 30s a silent server ended the copy only after 45 s, with /readyz 200
		// meanwhile; the probe's wait is now a readiness problem after a few seconds.
		s := &metrics.Stats{}
		s.SetSilentAfter(2 * time.Second)
		cfg := Config{PGURL: "postgres://u@" + silent.Addr().String() + "/db?sslmode=disable", PGTimeout: 2 * time.Second,
			WaitOnPostgres: s.WaitOnPostgres}
		done := make(chan error, 1)
		go func() { done <- cfg.probe(context.Background()) }()
		time.Sleep(1500 * time.Millisecond)
		if p := s.WaitingOnPostgres(); !strings.Contains(p, "answer the initial snapshot's probe") {
			t.Errorf("1.5 s into a probe of a silent server (bound 2s): readiness problem %q, want the probe's wait", p)
		}
		<-done
		if p := s.WaitingOnPostgres(); p != "" {
			t.Errorf("after the probe: %q, want none", p)
		}
	})
	t.Run("a stop is not silence", func(t *testing.T) {
		parent, stop := context.WithCancel(context.Background())
		ctx, end := Config{PGURL: healthy, PGTimeout: time.Second}.watch(parent)
		stop()
		<-ctx.Done()
		if err := end(context.Canceled); !errors.Is(err, context.Canceled) {
			t.Fatalf("end after a stop = %v, want context.Canceled", err)
		}
	})
}
