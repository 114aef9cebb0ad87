package e2e

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestNamesAreQuotedEverywhere runs migrate, run and status with a publication, a router schema and an outbox
// table whose names PostgreSQL folds or splits when unquoted: mixed case, an embedded double quote, a comma,
// a single quote and a dollar-quote delimiter. Each name is taken as it is written, so the publication migrate
// creates is the one run asks START_REPLICATION for, and the setup check finds the schema and the table.
func TestNamesAreQuotedEverywhere(t *testing.T) {
	cases := []struct{ name, publication, schema, table string }{
		{"mixed case", "MyPub", "CDC_Q4", "Shop.Outbox"},
		{"quotes, commas and dollars", `My"Pub,x'$$`, `CDC_Q4,"s"`, `Shop.Out"box,A`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newStreamEnv(t)
			c := e.consume(e.queue)
			e.exec(`CREATE SCHEMA "Shop"`)
			flags := []string{"--publication", tc.publication, "--schema", tc.schema, "--table", tc.table}
			if out, code := e.cli(append([]string{"migrate"}, flags...)...); code != 0 {
				t.Fatalf("migrate: exit %d\n%s", code, out)
			}
			if n := e.scalar(`SELECT count(*)::text FROM pg_publication WHERE pubname = $1`, tc.publication); n != "1" {
				t.Fatalf("publication %q: %s found", tc.publication, n)
			}
			table := pgx.Identifier(strings.SplitN(tc.table, ".", 2)).Sanitize()
			before := e.insertOne(table, "before")
			r := e.startStreaming(append(flags, "--slot", e.slot)...)
			after := e.insertOne(table, "after")
			got := c.waitFor(t, []row{{id: before}, {id: after}}, 30*time.Second)
			if len(got) != 2 {
				t.Errorf("%d deliveries, want 2", len(got))
			}
			out, code := e.cli("status", "--slot", e.slot, "--schema", tc.schema)
			if code != 0 || !strings.Contains(out, "stored position:") {
				t.Errorf("status: exit %d\n%s", code, out)
			}
			r.signal(syscall.SIGTERM)
			if code := r.wait(30 * time.Second); code != 0 {
				t.Fatalf("router exited %d", code)
			}
		})
	}
}
