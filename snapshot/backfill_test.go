package snapshot

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestBackfillFailureIsRecordedAndTheJobLocked: a backfill holds its job's lock while it runs (a second
// one is refused with ErrJobBusy, and Locked sees it); an error after the start records the job failed
// with the error; the same name with a corrected predicate starts over; Remove refuses a held job and an
// initial snapshot and forgets a failed one.
func TestBackfillFailureIsRecordedAndTheJobLocked(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 2, 3)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	jobs := NewJobs(state, "cdc_router")
	cfg := Config{Where: "nonexistent_col = 1"}

	_, err := Backfill(ctx, cfg, read, state, "fix", false, &fakePublisher{}, log, nil)
	if err == nil || !strings.Contains(err.Error(), "nonexistent_col") {
		t.Fatalf("Backfill with a bad predicate = %v", err)
	}
	j, ok, err := jobs.Load(ctx, BackfillName("fix"))
	if err != nil || !ok || !j.Failed() || !strings.Contains(j.Error, "nonexistent_col") {
		t.Fatalf("the failed job is %+v (%v, %v), want failed with its error", j, ok, err)
	}

	other := setupConn(t, state)
	if _, err := other.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", LockKey(BackfillName("fix"))); err != nil {
		t.Fatal(err)
	}
	if held, err := Locked(ctx, state, LockKey(BackfillName("fix"))); err != nil || !held {
		t.Errorf("Locked = %v, %v while another session holds the lock", held, err)
	}
	cfg.Where = "true"
	if _, err := Backfill(ctx, cfg, read, state, "fix", false, &fakePublisher{}, log, nil); !errors.Is(err, ErrJobBusy) {
		t.Errorf("Backfill while another process holds the job = %v, want ErrJobBusy", err)
	}
	if _, err := jobs.Remove(ctx, BackfillName("fix")); !errors.Is(err, ErrJobBusy) {
		t.Errorf("Remove of a held job = %v, want ErrJobBusy", err)
	}
	other.Exec(ctx, "SELECT pg_advisory_unlock_all()")

	pub := &fakePublisher{}
	job, err := Backfill(ctx, cfg, read, state, "fix", false, pub, log, nil)
	if err != nil || !job.Done() || len(pub.events) != 6 {
		t.Fatalf("Backfill with a corrected predicate = %+v, %v, %d events", job, err, len(pub.events))
	}
	if held, _ := Locked(ctx, state, LockKey(BackfillName("fix"))); held {
		t.Error("the job's lock is still held after the backfill returned")
	}
	if _, err := jobs.Remove(ctx, InitialName("slot1")); err == nil || !strings.Contains(err.Error(), "reset") {
		t.Errorf("Remove of an initial snapshot = %v", err)
	}
	if ok, err := jobs.Remove(ctx, BackfillName("fix")); !ok || err != nil {
		t.Errorf("Remove of a finished job = %v, %v", ok, err)
	}
}

// TestBackfillLogsSayBackfill: the log lines of a backfill name it a backfill, never a snapshot; an
// initial snapshot's reporter still says snapshot.
func TestBackfillLogsSayBackfill(t *testing.T) {
	ctx := context.Background()
	read, state := setup(t, 2, 3)
	var out strings.Builder
	log := slog.New(slog.NewTextHandler(&out, nil))
	job, err := Backfill(ctx, Config{}, read, state, "words", false, &fakePublisher{}, log, nil)
	if err != nil || !job.Done() {
		t.Fatalf("Backfill = %+v, %v", job, err)
	}
	if !strings.Contains(out.String(), `msg="backfill finished" job=backfill:words rows_done=6`) {
		t.Errorf("no backfill finished line:\n%s", out.String())
	}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if msg := line[strings.Index(line, "msg="):]; strings.Contains(strings.SplitN(msg, " job=", 2)[0], "snapshot") {
			t.Errorf("a backfill's log line says snapshot: %s", line)
		}
	}
	out.Reset()
	NewReporter(log, nil, InitialName("slot1"), 0).Finish(6)
	if !strings.Contains(out.String(), `msg="snapshot finished" job=initial:slot1`) {
		t.Errorf("an initial snapshot's reporter logs %q", out.String())
	}
}

// setupConn opens another session on the database of conn.
func setupConn(t *testing.T, conn *pgx.Conn) *pgx.Conn {
	t.Helper()
	c, err := pgx.ConnectConfig(context.Background(), conn.Config().Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestFailOnALostConnectionSaysSo: a failure that cannot be recorded because the connection is gone says
// so, and that the job resumes; it used to suggest running `cdc-router migrate` (chaos seed 1: a backfill
// under a PostgreSQL fast shutdown). A missing table still suggests it.
func TestFailOnALostConnectionSaysSo(t *testing.T) {
	ctx := context.Background()
	_, state := setup(t, 1, 1)
	if _, err := state.Exec(ctx, `CREATE SCHEMA unmigrated`); err != nil {
		t.Fatal(err)
	}
	err := NewJobs(state, "unmigrated").Fail(ctx, "backfill:x", errors.New("boom"))
	if err == nil || !strings.Contains(err.Error(), "cdc-router migrate") {
		t.Errorf("Fail without the jobs table = %v, want the migrate hint", err)
	}
	gone := setupConn(t, state)
	gone.Close(ctx)
	err = NewJobs(gone, "cdc_router").Fail(ctx, "backfill:x", errors.New("boom"))
	if err == nil || strings.Contains(err.Error(), "migrate") || !strings.Contains(err.Error(), "resumes it") {
		t.Errorf("Fail on a closed connection = %v, want the connection named and no migrate hint", err)
	}
}
