package migrations

import (
	"context"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestEmitKeysHiddenFromReadAllData: a member of pg_read_all_data reads every other table but no row of
// emit_keys (row level security, which that role does not bypass) and no statistics of its key columns
// after an ANALYZE; EmitKeyReaders leaves it out and names, each with how, a superuser, a member of a role
// granted SELECT, a BYPASSRLS member of pg_read_all_data and a REPLICATION role, and marks a REPLICATION
// role granted SELECT as a router's; the router's role reads the keys (LoadEmitKeys).
func TestEmitKeysHiddenFromReadAllData(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	c := connectAs(t, url, "postgres")
	if err := Apply(ctx, c, Config{Schema: "s", EmitFunction: true}); err != nil {
		t.Fatal(err)
	}
	n := testenv.Name(t)
	reader, super, member, bypass, repl, router, group := n+"_rad", n+"_su", n+"_member", n+"_bypass", n+"_repl", n+"_router", n+"_group"
	for _, stmt := range []string{
		"CREATE ROLE " + reader + " LOGIN IN ROLE pg_read_all_data",
		"CREATE ROLE " + super + " LOGIN SUPERUSER",
		"CREATE ROLE " + group + " NOLOGIN",
		"GRANT SELECT ON s.emit_keys TO " + group,
		"CREATE ROLE " + member + " LOGIN IN ROLE " + group,
		"CREATE ROLE " + bypass + " LOGIN BYPASSRLS IN ROLE pg_read_all_data",
		"CREATE ROLE " + repl + " LOGIN REPLICATION",
		"CREATE ROLE " + router + " LOGIN REPLICATION",
		"GRANT USAGE ON SCHEMA s TO " + router,
		"GRANT SELECT ON s.emit_keys TO " + router,
		"ANALYZE s.emit_keys",
	} {
		if _, err := c.Exec(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	t.Cleanup(func() {
		for _, r := range []string{reader, super, member, bypass, repl, router, group} {
			c.Exec(ctx, "DROP OWNED BY "+r+"; DROP ROLE "+r)
		}
	})

	rc := connectAs(t, url, reader)
	var keys, versions, stats int
	if err := rc.QueryRow(ctx, `SELECT (SELECT count(*) FROM s.emit_keys), (SELECT count(*) FROM s.schema_version),
		(SELECT count(*) FROM pg_statistic WHERE starelid = 's.emit_keys'::regclass AND staattnum IN (2, 3, 4))`).Scan(&keys, &versions, &stats); err != nil {
		t.Fatal(err)
	}
	if keys != 0 || versions != 1 || stats != 0 {
		t.Errorf("a pg_read_all_data member reads %d keys, %d schema versions and %d statistics rows of the key columns, want 0, 1, 0",
			keys, versions, stats)
	}
	if loaded, err := LoadEmitKeys(ctx, connectAs(t, url, router), "s"); err != nil || len(loaded) != 1 {
		t.Errorf("the router's role loads %d keys: %v", len(loaded), err)
	}

	readers, err := EmitKeyReaders(ctx, c, "s")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]EmitKeyReader{}
	for _, r := range readers {
		got[r.Role] = r
	}
	for role, via := range map[string]string{super: "superuser", member: "granted SELECT through " + group, bypass: "BYPASSRLS",
		repl: "REPLICATION", router: "REPLICATION"} {
		if got[role].Via != via {
			t.Errorf("%s: read via %q, want %q", role, got[role].Via, via)
		}
	}
	if _, ok := got[reader]; ok {
		t.Errorf("the pg_read_all_data member is named a reader: %+v", got[reader])
	}
	if _, ok := got["postgres"]; ok {
		t.Errorf("the owner is named a reader")
	}
	if !got[router].Router || got[repl].Router || got[super].Router {
		t.Errorf("router roles: %v %v %v, want only %s", got[router], got[repl], got[super], router)
	}
	w := EmitKeyReadersWarning(readers, "s", func(r EmitKeyReader) bool { return r.Router })
	if !strings.Contains(w, super+" (superuser)") || strings.Contains(w, router) || !strings.Contains(w, "docs/howto/secure.md") {
		t.Errorf("warning %q", w)
	}
}
