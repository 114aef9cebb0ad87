package migrations

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// EmitKeyReader is a role that can log in and read the emit keys, so that it can sign an event the router
// publishes as authentic, and how.
type EmitKeyReader struct {
	Role string
	Via  string // superuser, owner, REPLICATION, granted SELECT, BYPASSRLS; " through <role>" when by membership
	// Router is set when it reads the keys as the routers' roles do: REPLICATION and SELECT granted on the table.
	Router bool
}

func (r EmitKeyReader) String() string { return r.Role + " (" + r.Via + ")" }

// EmitKeyReaders are the roles that can log in and read the rows of <schema>.emit_keys, other than its
// owner: superusers and the members of a superuser role; the members of the owner; roles with the REPLICATION
// attribute (a base backup holds every table's files, whatever pg_hba.conf's replication lines say about a
// replication=database connection); roles granted SELECT on the table, directly or through a role (the row
// level security policy of sql/016 shows the rows to them); roles with BYPASSRLS that can SELECT it
// (through pg_read_all_data, say). A member of pg_read_all_data alone is not one. It is nil when the table
// does not exist.
func EmitKeyReaders(ctx context.Context, conn *pgx.Conn, schema string) ([]EmitKeyReader, error) {
	rows, _ := conn.Query(ctx, `WITH t AS (SELECT c.oid, c.relowner, c.relacl FROM pg_class c
			WHERE c.oid = to_regclass(format('%I.emit_keys', $1::text)))
		SELECT l.rolname, g.oid = l.oid, g.rolname, g.rolsuper, g.oid = t.relowner, g.oid = l.oid AND l.rolreplication,
			EXISTS (SELECT FROM aclexplode(t.relacl) a WHERE a.grantee IN (g.oid, 0) AND a.privilege_type = 'SELECT'),
			g.rolbypassrls AND has_table_privilege(g.oid, t.oid, 'SELECT')
		FROM t, pg_roles l, pg_roles g
		WHERE l.rolcanlogin AND l.oid <> t.relowner AND pg_has_role(l.oid, g.oid, 'MEMBER')
		ORDER BY l.rolname, g.oid <> l.oid, g.rolname`, schema)
	type reading struct {
		EmitKeyReader
		rank                 int // of Via in reasons, lower is stronger; len(reasons) for none
		replication, granted bool
	}
	reasons := []string{"superuser", "member of the owner", "REPLICATION", "granted SELECT", "BYPASSRLS"}
	var all []reading
	var role, by string
	var self, super, owner, replication, granted, bypass bool
	_, err := pgx.ForEachRow(rows, []any{&role, &self, &by, &super, &owner, &replication, &granted, &bypass}, func() error {
		if n := len(all); n == 0 || all[n-1].Role != role {
			all = append(all, reading{EmitKeyReader: EmitKeyReader{Role: role}, rank: len(reasons)})
		}
		r := &all[len(all)-1]
		r.replication, r.granted = r.replication || replication, r.granted || granted
		for i, on := range []bool{super, owner, replication, granted, bypass} {
			if on && i < r.rank { // the role's own row comes first: its own attributes before a membership's
				r.rank, r.Via = i, reasons[i]
				if !self {
					r.Via += " through " + by
				}
			}
		}
		return nil
	})
	var out []EmitKeyReader
	for _, r := range all {
		if r.rank < len(reasons) {
			r.Router = r.replication && r.granted
			out = append(out, r.EmitKeyReader)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read who can read %s.emit_keys: %w", pgx.Identifier{schema}.Sanitize(), err)
	}
	return out, nil
}

// EmitKeyReadersWarning is the sentence migrate and run print about the roles of EmitKeyReaders other than
// those skip says to leave out: they can read the key and sign events the router publishes as authentic.
// It is "" when there is none.
func EmitKeyReadersWarning(readers []EmitKeyReader, schema string, skip func(EmitKeyReader) bool) string {
	var named []string
	for _, r := range readers {
		if skip == nil || !skip(r) {
			named = append(named, r.String())
		}
	}
	if len(named) == 0 {
		return ""
	}
	return fmt.Sprintf("%d role(s) besides the owner and the routers' roles can read %s.emit_keys, so they can sign "+
		"events the router publishes as authentic: %s; revoke what they do not need (docs/howto/secure.md#who-can-forge-a-signed-event)",
		len(named), pgx.Identifier{schema}.Sanitize(), strings.Join(named, ", "))
}
