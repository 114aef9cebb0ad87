package migrations

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestRoutersGrantedToTheRolesOfPositions: roles granted the documented rights ON ALL TABLES IN SCHEMA
// before 015 created the routers table (a router's role, with UPDATE on positions, and a reader's, with
// SELECT) are granted what they need on it by the migration: the router's role reads and writes it and
// passes Check, the reader's only reads it; a role granted on positions only after 015 is granted at the
// next migrate, and every run is idempotent.
func TestRoutersGrantedToTheRolesOfPositions(t *testing.T) {
	ctx := context.Background()
	c := migrated(t)
	router := pgx.Identifier{"Router-" + testenv.Name(t)}.Sanitize()
	reader := pgx.Identifier{"reader_" + testenv.Name(t)}.Sanitize()
	late := pgx.Identifier{"late_" + testenv.Name(t)}.Sanitize()
	exec(t, c, "DROP TABLE cdc_router.routers") // the schema as an older release left it
	exec(t, c, "CREATE ROLE "+router+" LOGIN REPLICATION; CREATE ROLE "+reader+" LOGIN; CREATE ROLE "+late+" LOGIN; "+
		"GRANT USAGE ON SCHEMA cdc_router TO "+router+", "+reader+", "+late+"; "+
		"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cdc_router TO "+router+"; "+
		"GRANT USAGE ON ALL SEQUENCES IN SCHEMA cdc_router TO "+router+"; GRANT SELECT ON public.outbox TO "+router+"; "+
		"GRANT SELECT ON ALL TABLES IN SCHEMA cdc_router TO "+reader)
	for i := 0; i < 2; i++ {
		if err := Apply(ctx, c, Config{}); err != nil {
			t.Fatalf("Apply #%d: %v", i+1, err)
		}
	}
	exec(t, c, "SET ROLE "+router)
	exec(t, c, `INSERT INTO cdc_router.routers (slot, instance, role, publication, tables) VALUES ('s', 'i', 'streaming', 'p', '{t}');
		UPDATE cdc_router.routers SET role = 'standby'; SELECT * FROM cdc_router.routers; DELETE FROM cdc_router.routers`)
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check as the router's role after migrate: %v", err)
	}
	exec(t, c, "RESET ROLE; SET ROLE "+reader+"; SELECT * FROM cdc_router.routers")
	insertRefused(t, c)

	exec(t, c, "RESET ROLE; SET ROLE "+late)
	insertRefused(t, c)
	exec(t, c, "RESET ROLE; GRANT SELECT, INSERT, UPDATE ON cdc_router.positions TO "+late)
	if err := Apply(ctx, c, Config{}); err != nil {
		t.Fatal(err)
	}
	exec(t, c, "SET ROLE "+late+`; INSERT INTO cdc_router.routers (slot, instance, role, publication, tables)
		VALUES ('s', 'i', 'streaming', 'p', '{t}'); RESET ROLE`)

	var owner bool // the owner's own rights are never granted to it again
	if err := c.QueryRow(ctx, `SELECT count(*) = 0 FROM pg_class t, aclexplode(t.relacl) a
		WHERE t.oid = 'cdc_router.routers'::regclass AND a.grantee = t.relowner AND a.grantor <> t.relowner`).Scan(&owner); err != nil || !owner {
		t.Fatalf("the owner was granted rights on routers (%v)", err)
	}
}

// insertRefused fails the test unless an INSERT into routers as the current role is refused for want of
// the right (42501).
func insertRefused(t *testing.T, c *pgx.Conn) {
	t.Helper()
	_, err := c.Exec(context.Background(), `INSERT INTO cdc_router.routers (slot, instance, role, publication, tables)
		VALUES ('x', 'i', 'streaming', 'p', '{t}')`)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		t.Fatalf("INSERT into routers = %v, want permission denied", err)
	}
}
