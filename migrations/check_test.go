package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// problem runs Check and wants a Problem containing every string of want.
func problem(t *testing.T, c *pgx.Conn, cfg Config, want ...string) string {
	t.Helper()
	err := Check(context.Background(), c, cfg)
	var p *Problem
	if !errors.As(err, &p) {
		t.Fatalf("Check = %v, want a Problem", err)
	}
	t.Logf("Problem: %s", p.Msg)
	for _, w := range want {
		if !strings.Contains(p.Msg, w) {
			t.Fatalf("Check = %q, want it to contain %q", p.Msg, w)
		}
	}
	return p.Msg
}

// fix is the SQL a Problem names: the text between after and before.
func fix(t *testing.T, msg, after, before string) string {
	t.Helper()
	_, rest, ok := strings.Cut(msg, after)
	sql, _, ok2 := strings.Cut(rest, before)
	if !ok || !ok2 {
		t.Fatalf("no fix between %q and %q in %q", after, before, msg)
	}
	return sql
}

func exec(t *testing.T, c *pgx.Conn, sql string) {
	t.Helper()
	if _, err := c.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func migrated(t *testing.T) *pgx.Conn {
	t.Helper()
	c := connect(t)
	if err := Apply(context.Background(), c, Config{}); err != nil {
		t.Fatal(err)
	}
	return c
}

func TestCheckRefusesNullableKeys(t *testing.T) {
	c := migrated(t)
	exec(t, c, "ALTER TABLE outbox ALTER COLUMN aggregate_type DROP NOT NULL, ALTER COLUMN aggregate_version DROP NOT NULL")
	msg := problem(t, c, Config{}, `ALTER TABLE "public"."outbox" ALTER COLUMN aggregate_type SET NOT NULL, `+
		`ALTER COLUMN aggregate_version SET NOT NULL`)
	exec(t, c, fix(t, msg, "run ", " (after"))
	if err := Check(context.Background(), c, Config{}); err != nil {
		t.Fatalf("Check after the fix: %v", err)
	}
}

// TestCheckNeedsSlotsAndWalSenders starts a cluster of its own for each setting.
func TestCheckNeedsSlotsAndWalSenders(t *testing.T) {
	for _, tc := range []struct{ setting, want string }{
		{"max_replication_slots=0", "ALTER SYSTEM SET max_replication_slots = 10 as a superuser and restart PostgreSQL"},
		{"max_wal_senders=0", "ALTER SYSTEM SET max_wal_senders = 10 as a superuser and restart PostgreSQL"},
	} {
		t.Run(tc.setting, func(t *testing.T) {
			t.Parallel()
			p, err := testenv.StartPostgres(tc.setting)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx := context.Background()
			c, err := pgx.Connect(ctx, p.URL("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close(ctx)
			problem(t, c, Config{}, tc.want)
		})
	}
}

func TestCheckPublishesOnlyTheOutbox(t *testing.T) {
	cases := []struct {
		name, setup string
		want        []string
		after, end  string // the fix in the message, run to show that it works; empty when it is not SQL
	}{
		{"for all tables", "DROP PUBLICATION cdc_router_outbox; CREATE PUBLICATION cdc_router_outbox FOR ALL TABLES",
			[]string{"FOR ALL TABLES", "`cdc-router migrate --publication cdc_router_outbox_only`"}, "", ""},
		{"another table", "CREATE TABLE other (id int); CREATE TABLE \"Odd\" (id int); ALTER PUBLICATION cdc_router_outbox ADD TABLE other, \"Odd\"",
			[]string{`also publishes public.Odd, public.other`, `ALTER PUBLICATION "cdc_router_outbox" DROP TABLE "public"."Odd", "public"."other"`},
			"run ", ", or use"},
		{"another schema", "CREATE SCHEMA extra; CREATE TABLE extra.t (id int); ALTER PUBLICATION cdc_router_outbox ADD TABLES IN SCHEMA extra",
			[]string{`also publishes extra.t`, `ALTER PUBLICATION "cdc_router_outbox" DROP TABLES IN SCHEMA "extra", or`}, "run ", ", or use"},
		{"the outbox only through its schema", "ALTER PUBLICATION cdc_router_outbox DROP TABLE outbox; CREATE TABLE other (id int); " +
			"ALTER PUBLICATION cdc_router_outbox ADD TABLES IN SCHEMA public",
			[]string{`DROP TABLES IN SCHEMA "public"; ALTER PUBLICATION "cdc_router_outbox" ADD TABLE "public"."outbox"`}, "run ", ", or use"},
		{"a column list without headers", "ALTER PUBLICATION cdc_router_outbox SET TABLE outbox (id, aggregate_type, aggregate_id, " +
			"aggregate_version, event_type, schema_version, payload, occurred_at) WHERE (aggregate_type <> 'x')",
			[]string{"never see headers", `ALTER PUBLICATION "cdc_router_outbox" SET TABLE "public"."outbox" WHERE ((aggregate_type <> 'x'::text))`},
			"run ", " to publish"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := migrated(t)
			exec(t, c, tc.setup)
			msg := problem(t, c, Config{}, tc.want...)
			if strings.Count(msg, ": ") > 2 {
				t.Errorf("message is a chain of wrapped errors, want one sentence: %q", msg)
			}
			cfg := Config{}
			if tc.after == "" { // the dedicated publication
				cfg.Publication = "cdc_router_outbox_only"
				if err := Apply(context.Background(), c, cfg); err != nil {
					t.Fatal(err)
				}
			} else {
				exec(t, c, fix(t, msg, tc.after, tc.end))
			}
			if err := Check(context.Background(), c, cfg); err != nil {
				t.Fatalf("Check after the fix: %v", err)
			}
		})
	}
	t.Run("a row filter is allowed", func(t *testing.T) {
		c := migrated(t)
		exec(t, c, "ALTER PUBLICATION cdc_router_outbox SET TABLE outbox WHERE (aggregate_type <> 'x')")
		if err := Check(context.Background(), c, Config{}); err != nil {
			t.Fatalf("Check: %v", err)
		}
	})
}

// TestMigrationUpdatesAnOlderSchema: a schema made by 001-004 is refused until `migrate` runs again, which
// keeps the stored records.
func TestMigrationUpdatesAnOlderSchema(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	stmts, err := Statements(Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stmts[:4] {
		exec(t, c, s)
	}
	exec(t, c, `INSERT INTO cdc_router.quarantine (slot, lsn, table_name, reason, row_values)
		VALUES ('s', '0/1', 'public.outbox', 'old', '{}')`)
	problem(t, c, Config{}, "lacks cdc_router.publication_checks, cdc_router.schema_version, cdc_router.routers", "run `cdc-router migrate`")
	exec(t, c, "CREATE TABLE cdc_router.publication_checks (slot text PRIMARY KEY); CREATE TABLE cdc_router.schema_version (version int); "+
		"CREATE TABLE cdc_router.routers (slot text)")
	problem(t, c, Config{}, "cdc_router.quarantine predates this version", "run `cdc-router migrate`")
	exec(t, c, "DROP TABLE cdc_router.publication_checks, cdc_router.schema_version, cdc_router.routers")
	for i := 0; i < 2; i++ {
		if err := Apply(ctx, c, Config{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check after migrate: %v", err)
	}
	exec(t, c, `INSERT INTO cdc_router.quarantine (slot, lsn, row_key, table_name, event_id, reason, value_notes)
		VALUES ('s', '0/1', '#1', 'public.outbox', 'e', 'new', '{"values_not_stored": "x"}')`)
	exec(t, c, `INSERT INTO cdc_router.publication_checks (slot, ok_at) VALUES ('s', now())`)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM cdc_router.quarantine").Scan(&n); err != nil || n != 2 {
		t.Fatalf("%d records, %v; want the old and the new", n, err)
	}
}

// TestCheckNamesMissingGrants: a router role with every grant but one is told exactly that GRANT, one with
// none is told all of them at once, and running what the message says makes Check pass.
func TestCheckNamesMissingGrants(t *testing.T) {
	const grants = `GRANT USAGE ON SCHEMA cdc_router TO %[1]s;
		GRANT SELECT, INSERT, UPDATE ON cdc_router.positions TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON cdc_router.snapshots TO %[1]s;
		GRANT SELECT, INSERT ON cdc_router.quarantine TO %[1]s;
		GRANT USAGE ON SEQUENCE cdc_router.quarantine_id_seq TO %[1]s;
		GRANT SELECT, INSERT, UPDATE ON cdc_router.publication_checks TO %[1]s;
		GRANT SELECT ON cdc_router.schema_version TO %[1]s;
		GRANT SELECT, INSERT, UPDATE, DELETE ON cdc_router.routers TO %[1]s;
		GRANT SELECT ON public.outbox TO %[1]s`
	cases := []struct{ name, revoke, want string }{
		{"router schema", `REVOKE USAGE ON SCHEMA cdc_router FROM %s`, `GRANT USAGE ON SCHEMA "cdc_router"`},
		{"positions", `REVOKE UPDATE ON cdc_router.positions FROM %s`, `GRANT UPDATE ON "cdc_router"."positions"`},
		{"snapshots", `REVOKE DELETE ON cdc_router.snapshots FROM %s`, `GRANT DELETE ON "cdc_router"."snapshots"`},
		{"quarantine", `REVOKE INSERT ON cdc_router.quarantine FROM %s`, `GRANT INSERT ON "cdc_router"."quarantine"`},
		{"sequence", `REVOKE USAGE ON SEQUENCE cdc_router.quarantine_id_seq FROM %s`,
			`GRANT USAGE ON SEQUENCE "cdc_router"."quarantine_id_seq"`},
		{"publication checks", `REVOKE UPDATE ON cdc_router.publication_checks FROM %s`,
			`GRANT UPDATE ON "cdc_router"."publication_checks"`},
		{"routers", `REVOKE DELETE ON cdc_router.routers FROM %s`, `GRANT DELETE ON "cdc_router"."routers"`},
		{"outbox", `REVOKE SELECT ON public.outbox FROM %s`, `GRANT SELECT ON "public"."outbox"`},
		{"outbox schema", `REVOKE USAGE ON SCHEMA public FROM PUBLIC%.0s`, `GRANT USAGE ON SCHEMA "public"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := migrated(t)
			role := pgx.Identifier{"Router-" + testenv.Name(t)}.Sanitize() // quoted: upper case and a dash
			exec(t, c, "CREATE ROLE "+role+" LOGIN REPLICATION; "+fmt.Sprintf(grants, role)+"; "+fmt.Sprintf(tc.revoke, role))
			exec(t, c, "SET ROLE "+role)
			msg := problem(t, c, Config{}, tc.want+" TO "+role)
			if n := strings.Count(msg, "GRANT "); n != 1 {
				t.Fatalf("%d grants named, want 1: %q", n, msg)
			}
			exec(t, c, "RESET ROLE; "+fix(t, msg, "run ", " as the owner")+"; SET ROLE "+role)
			if err := Check(context.Background(), c, Config{}); err != nil {
				t.Fatalf("Check after the fix: %v", err)
			}
		})
	}
	t.Run("none", func(t *testing.T) {
		c := migrated(t)
		role := pgx.Identifier{testenv.Name(t)}.Sanitize()
		exec(t, c, "CREATE ROLE "+role+" LOGIN REPLICATION; SET ROLE "+role)
		msg := problem(t, c, Config{}, `GRANT USAGE ON SCHEMA "cdc_router" TO `+role+`; `+
			`GRANT SELECT, INSERT, UPDATE ON "cdc_router"."positions" TO `+role+`; `+
			`GRANT SELECT, INSERT, UPDATE, DELETE ON "cdc_router"."snapshots" TO `+role+`; `+
			`GRANT SELECT, INSERT ON "cdc_router"."quarantine" TO `+role+`; `+
			`GRANT USAGE ON SEQUENCE "cdc_router"."quarantine_id_seq" TO `+role+`; `+
			`GRANT SELECT, INSERT, UPDATE ON "cdc_router"."publication_checks" TO `+role+`; `+
			`GRANT SELECT ON "cdc_router"."schema_version" TO `+role+`; `+
			`GRANT SELECT, INSERT, UPDATE, DELETE ON "cdc_router"."routers" TO `+role+`; `+
			`GRANT SELECT ON "public"."outbox" TO `+role+` as the owner`)
		exec(t, c, "RESET ROLE; "+fix(t, msg, "run ", " as the owner")+"; SET ROLE "+role)
		if err := Check(context.Background(), c, Config{}); err != nil {
			t.Fatalf("Check after the fix: %v", err)
		}
	})
}

// TestCheckRefusesPositionsWithoutMarks: a positions table from before 010 (no mark columns), from before
// 017 (no mark_seen and mark_open) or from before 018 (no refusal columns) is refused with the fix; a second `migrate` adds them, keeps the
// stored row, and Check then passes.
func TestCheckRefusesPositionsWithoutMarks(t *testing.T) {
	t.Run("010", func(t *testing.T) {
		refusesPositionsWithout(t, "mark_commit_lsn, DROP COLUMN mark_xid, DROP COLUMN mark_done, DROP COLUMN mark_config, "+
			"DROP COLUMN mark_seen, DROP COLUMN mark_open", "migrations 010 and 017")
	})
	t.Run("017", func(t *testing.T) {
		refusesPositionsWithout(t, "mark_seen, DROP COLUMN mark_open", "migrations 010 and 017")
	})
	t.Run("018", func(t *testing.T) {
		refusesPositionsWithout(t, "refusal_until, DROP COLUMN refusal_strikes", "refusal columns of migration 018")
	})
}

// refusesPositionsWithout is TestCheckRefusesPositionsWithoutMarks with the columns named by drop dropped;
// the refusal names migrations.
func refusesPositionsWithout(t *testing.T, drop, migrations string) {
	ctx := context.Background()
	c := migrated(t)
	exec(t, c, `INSERT INTO cdc_router.positions (slot, system_id, timeline, lsn) VALUES ('s', '42', 1, '0/10')`)
	exec(t, c, `ALTER TABLE cdc_router.positions DROP COLUMN `+drop)
	problem(t, c, Config{}, "cdc_router.positions predates this version", migrations, "run `cdc-router migrate`")
	for i := 0; i < 2; i++ {
		if err := Apply(ctx, c, Config{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check after migrate: %v", err)
	}
	var lsn string
	if err := c.QueryRow(ctx, "SELECT lsn::text FROM cdc_router.positions WHERE slot = 's' AND mark_done IS NULL").Scan(&lsn); err != nil || lsn != "0/10" {
		t.Fatalf("stored position %q, %v after migrate; want 0/10 without a mark", lsn, err)
	}
}
