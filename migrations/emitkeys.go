package migrations

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// EmitKeyGrace is how long a key retired by `migrate --emit-function --retire-emit-keys` still verifies
// (LoadEmitKeys returns it) after it stopped signing: an event it signed in a transaction that was open or
// prepared at the retirement, or committed but not yet decoded, is published when it is decoded within it.
// `migrate --emit-function` deletes the keys retired longer ago (sql/016_emit_key_retirement.sql).
const EmitKeyGrace = 24 * time.Hour

// LoadEmitKeys reads the keys <schema>.emit signs emitted messages with (sql/007_emit_function.sql), by key
// id, for `run --message-prefix`: the router publishes only the messages they verify. A key retired less than
// EmitKeyGrace ago is among them, for verifying only (emit never signs with it). A missing or empty
// table, or one the router's role cannot read, is a *Problem naming the fix, so that the router never runs
// with a prefix whose events it could not tell from anyone else's.
func LoadEmitKeys(ctx context.Context, conn *pgx.Conn, schema string) (map[uint32][]byte, error) {
	table := pgx.Identifier{schema, "emit_keys"}.Sanitize()
	keys := map[uint32][]byte{}
	rows, _ := conn.Query(ctx, "SELECT key_id, key FROM "+table+
		" WHERE retired_at IS NULL OR retired_at > now() - make_interval(secs => $1)", EmitKeyGrace.Seconds())
	for rows.Next() {
		var id int32
		var key []byte
		if err := rows.Scan(&id, &key); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		keys[uint32(id)] = key
	}
	var pgErr *pgconn.PgError
	switch err := rows.Err(); {
	case errors.As(err, &pgErr) && (pgErr.Code == "42P01" || pgErr.Code == "3F000"):
		return nil, problemf("--message-prefix publishes only events signed by %s.emit, and %s does not exist: run "+
			"`cdc-router migrate --emit-function --emit-role <writer>` (as the schema's owner), then GRANT SELECT ON %s "+
			"TO the router's role", pgx.Identifier{schema}.Sanitize(), table, table)
	case errors.As(err, &pgErr) && pgErr.Code == "42501":
		return nil, problemf("--message-prefix needs the keys that sign emitted events, and this role cannot read %s: "+
			"GRANT SELECT ON %s TO %s (as the schema's owner); never grant it to the writers", table, table,
			pgx.Identifier{conn.Config().User}.Sanitize())
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	if len(keys) == 0 {
		return nil, problemf("--message-prefix publishes only events signed by %s.emit, and %s holds no key this role "+
			"may read: run `cdc-router migrate --emit-function`, and GRANT SELECT ON %s TO %s (as the schema's owner; "+
			"its rows show only to the roles granted SELECT on it, not to pg_read_all_data)", pgx.Identifier{schema}.Sanitize(),
			table, table, pgx.Identifier{conn.Config().User}.Sanitize())
	}
	return keys, nil
}

// EmitGrantees are the roles that may call <schema>.emit, by name (PUBLIC when every role may), as its ACL
// says; the owner is left out. migrate prints them so the operator sees who can publish emitted events.
func EmitGrantees(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	rows, _ := conn.Query(ctx, `SELECT DISTINCT CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE pg_get_userbyid(a.grantee) END
		FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
		WHERE p.oid = to_regprocedure(quote_ident($1) || '.emit(text,text,bigint,text,jsonb,jsonb,integer)')
		  AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner ORDER BY 1`, schema)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the grants on %s.emit: %w", pgx.Identifier{schema}.Sanitize(), err)
	}
	return names, nil
}
