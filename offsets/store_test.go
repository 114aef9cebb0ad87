package offsets

import (
	"context"
	"slices"
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
	m := Mark{Key: TxnKey{CommitLSN: 500, Xid: 7}, Done: 3, Seen: 3}
	s := NewStore(c, "cdc_router", "slot_m", time.Millisecond)
	must(s.Save(ctx, Position{LSN: 100, SystemID: "42", Timeline: 1, Mark: m, MarkConfig: "f"}, true))
	if p := load(); !p.Mark.Same(m) || p.MarkConfig != "f" || p.LSN != 100 {
		t.Fatalf("stored %+v, want 0/64 with mark %+v under f", p, m)
	}
	// What is confirmed beyond the prefix (017): items 3, 5 and 300 are not confirmed, 4, 6..299 and 301 are.
	m = Mark{Key: m.Key, Done: 3, Seen: 302, Open: []int{3, 5, 300}}
	time.Sleep(5 * time.Millisecond)
	must(s.Save(ctx, Position{LSN: 100, SystemID: "42", Timeline: 1, Mark: m, MarkConfig: "f"}, false))
	if p := load(); !p.Mark.Same(m) || p.Mark.Confirmed() != 299 {
		t.Fatalf("stored mark %+v, want %+v", p.Mark, m)
	}
	m = Mark{Key: m.Key, Done: 9}
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
	if p := load(); !p.Mark.Same(Mark{}) || p.LSN != 600 {
		t.Fatalf("stored %+v, want 0/258 without a mark", p)
	}
	old := NewStore(c, "cdc_router", "slot_m", 0)
	must(old.Save(ctx, Position{LSN: 550, SystemID: "42", Timeline: 1, Mark: Mark{Key: TxnKey{CommitLSN: 560, Xid: 8}, Done: 2},
		MarkConfig: "f"}, true))
	if p := load(); !p.Mark.Same(Mark{}) || p.LSN != 600 {
		t.Fatalf("stored %+v after an older writer, want 0/258 without a mark", p)
	}
	// A record that does not describe items between mark_done and mark_seen (written by hand) is left out.
	for _, open := range []string{`'\x05'`, `'\x00ff'`, `NULL`} {
		if _, err := c.Exec(ctx, `UPDATE cdc_router.positions SET mark_commit_lsn = '0/300', mark_xid = 9, mark_done = 2,
			mark_config = 'f', mark_seen = 5, mark_open = `+open+` WHERE slot = 'slot_m'`); err != nil {
			t.Fatal(err)
		}
		if p := load(); !p.Mark.Same(Mark{}) {
			t.Errorf("mark_open %s between 2 and 5 loaded as %+v, want no mark", open, p.Mark)
		}
	}
}

// TestOpenEncodingRoundTrips: the stored form of Open reads back the same, about a byte per item when the
// items are close together.
func TestOpenEncodingRoundTrips(t *testing.T) {
	for _, m := range []Mark{
		{Done: 0, Seen: 2, Open: []int{0}},
		{Done: 7, Seen: 1 << 40, Open: []int{7, 8, 1000, 1 << 39}},
	} {
		b := encodeOpen(m)
		got, ok := decodeOpen(b, m.Done, m.Seen)
		if !ok || !slices.Equal(got, m.Open) {
			t.Errorf("%v encoded as %x read back as %v %v", m.Open, b, got, ok)
		}
	}
	var open []int
	for i := 0; i < 60000; i += 2 {
		open = append(open, i)
	}
	if b := encodeOpen(Mark{Done: 0, Seen: 60001, Open: open}); len(b) != len(open) {
		t.Errorf("%d items every other one take %d bytes, want one each", len(open), len(b))
	}
}
