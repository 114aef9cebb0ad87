package offsets

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
