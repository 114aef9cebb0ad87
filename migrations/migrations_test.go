package migrations

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

func connect(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	c, err := pgx.Connect(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	return c
}

func TestApplyIsIdempotentAndCheckPasses(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	cfg := Config{Table: "app.events_outbox", Publication: "my_pub"}
	if err := Check(ctx, c, cfg); err == nil || !strings.Contains(err.Error(), "cdc-router migrate") {
		t.Fatalf("Check before migrate = %v, want a problem naming `cdc-router migrate`", err)
	}
	if _, err := c.Exec(ctx, "CREATE SCHEMA app"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := Apply(ctx, c, cfg); err != nil {
			t.Fatalf("Apply #%d: %v", i+1, err)
		}
	}
	if err := Check(ctx, c, cfg); err != nil {
		t.Fatalf("Check after migrate: %v", err)
	}
	var pubs int
	c.QueryRow(ctx, "SELECT count(*) FROM pg_publication_tables WHERE pubname='my_pub' AND tablename='events_outbox'").Scan(&pubs)
	if pubs != 1 {
		t.Fatalf("publication tables = %d, want 1", pubs)
	}
}

func TestCheckNamesTheFix(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name  string
		setup string
		want  string
	}{
		{"wrong column type", "ALTER TABLE outbox ALTER COLUMN aggregate_version TYPE text", "column aggregate_version is text"},
		{"missing column", "ALTER TABLE outbox DROP COLUMN headers", "column headers is missing"},
		{"table not in publication", "ALTER PUBLICATION cdc_router_outbox DROP TABLE outbox", "ALTER PUBLICATION"},
		{"publication missing", "DROP PUBLICATION cdc_router_outbox", `publication "cdc_router_outbox" does not exist`},
		{"no inserts published", "ALTER PUBLICATION cdc_router_outbox SET (publish = 'delete')", "does not publish inserts"},
		{"no replication right", "CREATE ROLE weak LOGIN; GRANT ALL ON SCHEMA public, cdc_router TO weak; SET ROLE weak", "no REPLICATION right"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := connect(t)
			if err := Apply(ctx, c, Config{}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Exec(ctx, tc.setup); err != nil {
				t.Fatal(err)
			}
			err := Check(ctx, c, Config{})
			var p *Problem
			if !errors.As(err, &p) || !strings.Contains(p.Msg, tc.want) {
				t.Fatalf("Check = %v, want a Problem containing %q", err, tc.want)
			}
			if strings.Count(p.Msg, ": ") > 2 {
				t.Errorf("message is a chain of wrapped errors, want one sentence: %q", p.Msg)
			}
		})
	}
}

func TestCheckWantsTheAggregateKey(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	if err := Apply(ctx, c, Config{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Exec(ctx, "ALTER TABLE outbox DROP CONSTRAINT outbox_aggregate_type_aggregate_id_aggregate_version_key"); err != nil {
		t.Fatal(err)
	}
	err := Check(ctx, c, Config{})
	if err == nil || !strings.Contains(err.Error(), "ADD UNIQUE (aggregate_type, aggregate_id, aggregate_version)") {
		t.Fatalf("Check = %v, want the missing unique key named", err)
	}
	if _, err := c.Exec(ctx, "CREATE UNIQUE INDEX ON outbox (aggregate_type, aggregate_id, aggregate_version)"); err != nil {
		t.Fatal(err)
	}
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check with a unique index: %v", err)
	}
}
