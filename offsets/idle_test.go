package offsets

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/migrations"
)

// TestSaveIdleWritesOncePerIdleInterval: an advance that only keepalives made is stored at most once per
// idle interval since the last write or load; a forced save still writes at once.
func TestSaveIdleWritesOncePerIdleInterval(t *testing.T) {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := migrations.Apply(ctx, c, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	stored := func() string {
		var lsn string
		if err := c.QueryRow(ctx, `SELECT lsn::text FROM cdc_router.positions WHERE slot = 'slot_i'`).Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	s := NewStore(c, "cdc_router", "slot_i", time.Millisecond)
	s.idle = 300 * time.Millisecond
	must(s.Save(ctx, Position{LSN: 100, SystemID: "42", Timeline: 1}, true))
	must(s.SaveIdle(ctx, Position{LSN: 200, SystemID: "42", Timeline: 1})) // within the idle interval
	if got := stored(); got != "0/64" || s.Saved() != 100 {
		t.Fatalf("stored %s (Saved %v) after an idle advance right after a write, want 0/64", got, s.Saved())
	}
	time.Sleep(350 * time.Millisecond)
	must(s.SaveIdle(ctx, Position{LSN: 300, SystemID: "42", Timeline: 1}))
	if got := stored(); got != "0/12C" {
		t.Fatalf("stored %s after the idle interval, want 0/12C", got)
	}
	fresh := NewStore(c, "cdc_router", "slot_i", time.Millisecond)
	fresh.idle = 300 * time.Millisecond
	if _, _, err := fresh.Load(ctx); err != nil {
		t.Fatal(err)
	}
	must(fresh.SaveIdle(ctx, Position{LSN: 400, SystemID: "42", Timeline: 1})) // a load counts as a write
	if got := stored(); got != "0/12C" {
		t.Fatalf("stored %s after an idle advance right after a load, want 0/12C", got)
	}
	must(fresh.Save(ctx, Position{LSN: 400, SystemID: "42", Timeline: 1}, true))
	if got := stored(); got != "0/190" {
		t.Fatalf("stored %s after a forced save, want 0/190", got)
	}
}
