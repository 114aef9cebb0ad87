package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/migrations"
)

// migrateEmitKeys is migrate --emit-function's work on the keys after the migration: with retire
// (--retire-emit-keys) it retires the keys older than the newest, waiting up to wait for what refuses it,
// and it warns on stderr about the roles besides the owner and the routers' that can read the keys.
func migrateEmitKeys(ctx context.Context, conn *pgx.Conn, schema string, retire bool, wait time.Duration, stdout, stderr io.Writer) error {
	if retire {
		r, err := migrations.RetireEmitKeys(ctx, conn, schema, wait, func(msg string) {
			fmt.Fprintf(stderr, "cdc-router migrate: %s\n", msg)
		})
		if err != nil {
			return err
		}
		if len(r.Keys) == 0 {
			fmt.Fprintf(stdout, "retired: no emit key; key %d signs\n", r.Signing)
		} else {
			fmt.Fprintf(stdout, "retired: emit keys %s; key %d signs, the routers verify with the retired keys until %v from now "+
				"(a later migrate --emit-function deletes them)\n", migrations.KeyList(r.Keys), r.Signing, migrations.EmitKeyGrace)
		}
		if len(r.Deleted) > 0 {
			fmt.Fprintf(stdout, "deleted: emit keys %s, retired more than %v ago\n", migrations.KeyList(r.Deleted), migrations.EmitKeyGrace)
		}
	}
	readers, err := migrations.EmitKeyReaders(ctx, conn, schema)
	if err != nil {
		return err
	}
	// migrate does not know the routers' roles: those with REPLICATION and SELECT granted on the keys are theirs.
	if w := migrations.EmitKeyReadersWarning(readers, schema, func(r migrations.EmitKeyReader) bool { return r.Router }); w != "" {
		fmt.Fprintf(stderr, "cdc-router migrate: warning: %s\n", w)
	}
	return nil
}
