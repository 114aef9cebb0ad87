package replication

import (
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/copyboth"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/migrations"
)

// TestCleanPostgresShutdownIsCausePostgres: a fast stop of PostgreSQL (pg_ctl stop -m fast) ends the stream
// with a restart counted as cause=postgres, not other. A walsender that has sent and seen acknowledged all
// the WAL ends the stream with CommandComplete ('C', "COPY 0": WalSndDone), with no CopyDone before it, and
// exits; before, that was an "unexpected message 'C'", cause other. (In about one run of five the ordinary
// connection's FATAL 57P01 ends the session first, which was cause postgres already; TestStreamEndFramesAreCausePostgres
// pins the CommandComplete whatever the race.) The cluster is the test's own, since it stops it.
func TestCleanPostgresShutdownIsCausePostgres(t *testing.T) {
	own, err := testenv.StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	ctx := context.Background()
	url := own.NewDatabase(t)
	admin, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	err = migrations.Apply(ctx, admin, migrations.Config{})
	admin.Close(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out testenv.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	stats := &metrics.Stats{}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- Run(rctx, Config{PGURL: url, Slot: testenv.Name(t), PGTimeout: 5 * time.Second, ShutdownTimeout: 2 * time.Second},
			func(context.Context) (Publisher, error) { return &unconfirming{}, nil }, log, stats)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	await := func(what string, cond func() bool) {
		t.Helper()
		for began := time.Now(); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Since(began) > 30*time.Second {
				t.Fatalf("no %s after 30 s; log:\n%s", what, out.String())
			}
		}
	}
	await("streaming", func() bool { s, _, _ := stats.State(); return s == metrics.StateStreaming })

	own.Stop("fast")
	await("restart", func() bool { return stats.Restarts() > 0 })
	if err := own.Start(); err != nil {
		t.Fatal(err)
	}
	await("streaming again", func() bool { s, _, _ := stats.State(); return s == metrics.StateStreaming })

	first := regexp.MustCompile(`(?m)^.*msg="stream stopped; restarting.*$`).FindString(out.String())
	t.Logf("%s", first)
	if !strings.Contains(first, "cause="+metrics.CausePostgres) {
		t.Errorf("the restart after a fast stop of PostgreSQL: %s\nwant cause=%s", first, metrics.CausePostgres)
	}
}

// TestStreamEndFramesAreCausePostgres: the messages with which PostgreSQL ends a replication stream, CopyDone
// and the CommandComplete of a walsender that shuts down (TestCleanPostgresShutdownIsCausePostgres), end the
// session as cause=postgres, in a sentence that says PostgreSQL ended the stream.
func TestStreamEndFramesAreCausePostgres(t *testing.T) {
	s := &session{}
	for _, typ := range []byte{'c', 'C'} {
		err := s.frame(copyboth.Frame{Type: typ, Data: []byte("COPY 0\x00")})
		if err == nil || causeOf(err) != metrics.CausePostgres || !strings.Contains(err.Error(), "PostgreSQL ended the replication stream") {
			t.Errorf("frame %q: %v (cause %s); want cause postgres, saying PostgreSQL ended the stream", typ, err, causeOf(err))
		}
	}
}
