package chaos

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// messagePrefix is the routers' --message-prefix with gen.Setup.Emit (migrate's default prefix).
const messagePrefix = "cdc-router.outbox"

// emitted is the business table an OpEmit transaction writes each emitted event's id to, in the same
// transaction: emitted events are in the WAL only, so this table is the truth of which ones committed.
const emitted = "public.chaos_emitted"

// writerRole may write the outbox tables and call emit (migrate --emit-role); intruderRole may only log
// in (the other roles of docs/howto/secure.md#postgresql-roles's table): roles are cluster-wide, so they carry the database's
// name.
func (w *world) writerRole() string   { return w.db + "_writer" }
func (w *world) intruderRole() string { return w.db + "_intruder" }

// createEmitRoles creates the two roles before migrate names the writer, and drops them when the test ends.
func (w *world) createEmitRoles(ctx context.Context, conn *pgx.Conn) error {
	for _, role := range []string{w.writerRole(), w.intruderRole()} {
		if _, err := conn.Exec(ctx, `CREATE ROLE `+role+` LOGIN`); err != nil {
			return fmt.Errorf("create role %s: %w", role, err)
		}
		w.dropRoleAtCleanup(ctx, role)
	}
	return nil
}

// dropRoleAtCleanup drops role, and what it owns, when the test ends.
func (w *world) dropRoleAtCleanup(ctx context.Context, role string) {
	w.t.Cleanup(func() {
		c, err := pgx.Connect(ctx, w.pg.URL(w.db))
		if err != nil {
			return
		}
		defer c.Close(ctx)
		c.Exec(ctx, `DROP OWNED BY `+role)
		c.Exec(ctx, `DROP ROLE `+role)
	})
}

// grantWriter gives the writer role what a service that writes events needs (docs/howto/secure.md#postgresql-roles,
// the writers' row): INSERT on the outbox tables and its business table, SELECT and DELETE for the
// insert-delete transactions; EXECUTE on emit is migrate's (--emit-role).
func (w *world) grantWriter(ctx context.Context, conn *pgx.Conn) error {
	if _, err := conn.Exec(ctx, `CREATE TABLE `+emitted+` (id text PRIMARY KEY)`); err != nil {
		return err
	}
	tables := append([]string{emitted}, w.plan.Setup.Tables...)
	_, err := conn.Exec(ctx, `GRANT SELECT, INSERT, DELETE ON `+strings.Join(tables, ", ")+` TO `+w.writerRole())
	if err == nil && w.plan.Setup.Mapped {
		_, err = conn.Exec(ctx, `GRANT USAGE ON SEQUENCE public.events_mapped_seq_seq TO `+w.writerRole())
	}
	return err
}

// roleURL is the database's URL as role, straight to PostgreSQL (trust authentication).
func (w *world) roleURL(role string) string {
	return strings.Replace(w.directURL(), "postgres://postgres@", "postgres://"+role+"@", 1)
}

// emitRows emits rs through cdc_router.emit in tx, each with its id recorded in the emitted table in the
// same statement; emit chooses the id, so rs[i].ID is set from what it returned.
func (wr *writer) emitRows(ctx context.Context, tx pgx.Tx, rs []check.Row) error {
	for i := range rs {
		_, agg, ev, pl, hd := wr.values(rs[i])
		err := tx.QueryRow(ctx, `INSERT INTO `+emitted+` (id) SELECT cdc_router.emit('order', $1, $2, $3, $4::jsonb, $5::jsonb)::text
			RETURNING id`, agg, rs[i].Version, ev, pl, hd).Scan(&rs[i].ID)
		if err != nil {
			return fmt.Errorf("emit: %w", err)
		}
	}
	return nil
}

// forge writes op's messages as the intruder role, each in a transaction of its own: an envelope without a
// signature, one with a made-up MAC, or a call of emit itself. It returns the rows (Forged: never to be
// published) and, for each call of emit, its outcome; the call must be refused.
func (wr *writer) forge(ctx context.Context, op gen.Step) ([]check.Row, []string) {
	var rows []check.Row
	var calls []string
	for range op.N {
		if wr.intruder == nil { // first, or closed after a failure (PostgreSQL restarting)
			c, err := pgx.Connect(ctx, wr.w.roleURL(wr.w.intruderRole()))
			if err != nil {
				return rows, calls
			}
			wr.intruder = c
		}
		wr.txn++ // each message is a transaction of its own
		r := check.Row{Txn: wr.txn, ID: uuid(), Aggregate: fmt.Sprintf("order/w%d-%d", wr.n, wr.erng.IntN(aggregatesPerWriter)),
			Version: 1_000_000 + wr.erng.Int64N(1000), Op: gen.OpForged, Forged: true, Table: "message:" + messagePrefix}
		envelope := fmt.Sprintf(`{"id": %q, "aggregate_type": "order", "aggregate_id": %q, "aggregate_version": %d, "event_type": "forged", `+
			`"payload": {"token": %q}, "headers": {}}`, r.ID, strings.TrimPrefix(r.Aggregate, "order/"), r.Version, wr.w.token)
		var err error
		switch wr.erng.IntN(3) {
		case 0:
			_, err = wr.intruder.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::text)`, messagePrefix, envelope)
		case 1:
			mac := fmt.Sprintf("v1:1:%064x\n", wr.erng.Uint64())
			_, err = wr.intruder.Exec(ctx, `SELECT pg_logical_emit_message(true, $1, $2::text)`, messagePrefix, mac+envelope)
		default:
			var id string
			err = wr.intruder.QueryRow(ctx, `SELECT cdc_router.emit('order', $1, $2, 'forged', $3::jsonb)::text`,
				strings.TrimPrefix(r.Aggregate, "order/"), r.Version, fmt.Sprintf(`{"token": %q}`, wr.w.token)).Scan(&id)
			switch {
			case err == nil:
				r.ID = id
				calls = append(calls, "succeeded: emit returned "+id)
			case strings.Contains(err.Error(), "permission denied"):
				calls = append(calls, "refused: "+check.Trim(err.Error(), 200))
				continue // nothing was written
			default:
				calls = append(calls, "failed otherwise: "+check.Trim(err.Error(), 200))
				err = nil // an unknown outcome: it must not be published either way
			}
		}
		if err != nil {
			// The connection is gone (a PostgreSQL restart): the rest of op waits for a new one, next time
			// (seed 809: the next message used the closed connection, a nil pointer).
			wr.intruder.Close(context.Background())
			wr.intruder = nil
			r.Unknown = true
			rows = append(rows, r)
			break
		}
		rows = append(rows, r)
	}
	return rows, calls
}
