package offsets

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

func TestStoreBatchesAndNeverGoesBack(t *testing.T) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	s := NewStore(c, "cdc_router", "slot_a", time.Hour)
	if _, ok, err := s.Load(ctx); ok || err != nil {
		t.Fatalf("Load on empty table = %v, %v", ok, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.Save(ctx, Position{LSN: 100, SystemID: "42", Timeline: 1}, false)) // first write is due
	must(s.Save(ctx, Position{LSN: 200, SystemID: "42", Timeline: 1}, false)) // batched away
	fresh := NewStore(c, "cdc_router", "slot_a", time.Hour)
	p, ok, err := fresh.Load(ctx)
	if err != nil || !ok || p.LSN != 100 || p.SystemID != "42" {
		t.Fatalf("stored = %+v %v %v, want 0/64 from cluster 42", p, ok, err)
	}
	must(s.Save(ctx, Position{LSN: 200, SystemID: "42", Timeline: 1}, true))
	must(fresh.Save(ctx, Position{LSN: 150, SystemID: "42", Timeline: 1}, true)) // an older writer
	p, _, _ = NewStore(c, "cdc_router", "slot_a", 0).Load(ctx)
	if p.LSN != 200 {
		t.Fatalf("stored LSN = %v after an older save, want 0/C8", p.LSN)
	}
}

// TestDueAgreesWithSave: Due says "write" exactly when Save (SaveIdle when idle) would write, so a caller
// that skips Save on !Due never skips a write.
func TestDueAgreesWithSave(t *testing.T) {
	now := time.Now()
	tests := []struct {
		name               string
		saved, lsn         uint64
		sinceWrite         time.Duration
		force, idle, wants bool
	}{
		{name: "nothing yet", lsn: 0, sinceWrite: time.Hour, force: true},
		{name: "not moved", saved: 100, lsn: 100, sinceWrite: time.Hour, force: true},
		{name: "went back", saved: 100, lsn: 50, sinceWrite: time.Hour, force: true},
		{name: "moved, interval not passed", saved: 100, lsn: 200, sinceWrite: 10 * time.Millisecond},
		{name: "moved, interval passed", saved: 100, lsn: 200, sinceWrite: 2 * time.Second, wants: true},
		{name: "moved, forced", saved: 100, lsn: 200, sinceWrite: 0, force: true, wants: true},
		{name: "idle, idle interval not passed", saved: 100, lsn: 200, sinceWrite: 2 * time.Second, idle: true},
		{name: "idle, idle interval passed", saved: 100, lsn: 200, sinceWrite: 2 * time.Minute, idle: true, wants: true},
		{name: "idle but forced", saved: 100, lsn: 200, sinceWrite: 0, idle: true, force: true, wants: true},
	}
	for _, tt := range tests {
		s := &Store{interval: time.Second, idle: time.Minute, saved: cdc.LSN(tt.saved), lastWrite: now.Add(-tt.sinceWrite)}
		if got := s.Due(Position{LSN: cdc.LSN(tt.lsn)}, tt.force, tt.idle); got != tt.wants {
			t.Errorf("%s: Due = %v, want %v", tt.name, got, tt.wants)
		}
	}
}

// TestStoreKeepsTheMarkWithItsPosition: the progress inside a transaction is stored in the same row write
// as the position, read back by a fresh store, written when only it moved (also by SaveIdle, which
// otherwise waits for the idle interval), cleared by a position without one, and never kept by a write
// that would take the position back.
func TestStoreKeepsTheMarkWithItsPosition(t *testing.T) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	load := func() Position {
		t.Helper()
		p, ok, err := NewStore(c, "cdc_router", "slot_m", 0).Load(ctx)
		if err != nil || !ok {
			t.Fatalf("Load = %v, %v", ok, err)
		}
		return p
	}
	m := Mark{Key: TxnKey{CommitLSN: 500, Xid: 7}, Done: 3}
	s := NewStore(c, "cdc_router", "slot_m", time.Millisecond)
	must(s.Save(ctx, Position{LSN: 100, SystemID: "42", Timeline: 1, Mark: m, MarkConfig: "f"}, true))
	if p := load(); p.Mark != m || p.MarkConfig != "f" || p.LSN != 100 {
		t.Fatalf("stored %+v, want 0/64 with mark %+v under f", p, m)
	}
	m.Done = 9
	time.Sleep(5 * time.Millisecond)
	next := Position{LSN: 100, SystemID: "42", Timeline: 1, Mark: m, MarkConfig: "f"}
	if !s.Due(next, false, true) {
		t.Fatal("a moved mark is not due on an idle stream")
	}
	must(s.SaveIdle(ctx, next))
	if p := load(); p.Mark.Done != 9 {
		t.Fatalf("stored mark %+v after a mark-only move, want 9 done", p.Mark)
	}
	m.Done = 10
	time.Sleep(5 * time.Millisecond)
	next = Position{LSN: 110, SystemID: "42", Timeline: 1, Mark: m, MarkConfig: "f"} // keepalives moved the LSN too
	if !s.Due(next, false, true) {
		t.Fatal("a moved mark with an LSN that keepalives moved is not due on an idle stream")
	}
	must(s.SaveIdle(ctx, next))
	if p := load(); p.Mark.Done != 10 || p.LSN != 110 {
		t.Fatalf("stored %+v after a mark and keepalive move, want 0/6E with 10 done", p)
	}
	must(s.Save(ctx, Position{LSN: 600, SystemID: "42", Timeline: 1}, true))
	if p := load(); p.Mark != (Mark{}) || p.LSN != 600 {
		t.Fatalf("stored %+v, want 0/258 without a mark", p)
	}
	old := NewStore(c, "cdc_router", "slot_m", 0)
	must(old.Save(ctx, Position{LSN: 550, SystemID: "42", Timeline: 1, Mark: Mark{Key: TxnKey{CommitLSN: 560, Xid: 8}, Done: 2},
		MarkConfig: "f"}, true))
	if p := load(); p.Mark != (Mark{}) || p.LSN != 600 {
		t.Fatalf("stored %+v after an older writer, want 0/258 without a mark", p)
	}
}
