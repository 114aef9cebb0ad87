package chaos

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// pgRouterRole is the PostgreSQL role the routers connect as on the seeds of the harness's own node
// (gen.Setup.OwnBroker: those may revoke one of its rights, gen.FaultPGRights); otherwise they connect as
// the superuser, as the writers' commands always do.
func (w *world) pgRouterRole() string { return w.db + "_router" }

// createPGRouterRole creates pgRouterRole with the rights docs/howto/set-up-the-database.md#database-role-and-access
// lists, after migrate: LOGIN REPLICATION, SELECT on the tables it reads, read and write on the router's
// schema; and drops it when the test ends.
func (w *world) createPGRouterRole(ctx context.Context, conn *pgx.Conn) error {
	role := w.pgRouterRole()
	stmts := []string{`CREATE ROLE ` + role + ` LOGIN REPLICATION`,
		`GRANT USAGE ON SCHEMA public TO ` + role,
		`GRANT SELECT ON ` + strings.Join(w.plan.Setup.Tables, ", ") + ` TO ` + role,
		`GRANT USAGE ON SCHEMA cdc_router TO ` + role,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cdc_router TO ` + role,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA cdc_router TO ` + role}
	for i, q := range stmts {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
		if i == 0 {
			w.dropRoleAtCleanup(ctx, role)
		}
	}
	return nil
}

// pgRightsFault takes REPLICATION (f.N 0) or SELECT on public.outbox (1) from the routers' role for f.Dur,
// terminating its sessions so that the change applies at once (a session keeps the rights it started
// with for REPLICATION), or INSERT, UPDATE and DELETE on the router's own tables (2: the stored position,
// the quarantine, the snapshot's progress), its sessions left running, so that the next write of a
// streaming router meets the refusal; then gives it back.
func (w *world) pgRightsFault(f gen.Step) {
	role := w.pgRouterRole()
	revoke, grant := `ALTER ROLE `+role+` NOREPLICATION`, `ALTER ROLE `+role+` REPLICATION`
	switch f.N {
	case 1:
		revoke, grant = `REVOKE SELECT ON public.outbox FROM `+role, `GRANT SELECT ON public.outbox TO `+role
	case 2:
		revoke = `REVOKE INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cdc_router FROM ` + role
		grant = `GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cdc_router TO ` + role
	}
	ctx := context.Background()
	from := time.Now()
	var notes []string
	c := w.connect(ctx)
	if _, err := c.Exec(ctx, revoke); err != nil {
		notes = append(notes, fmt.Sprintf("revoke: %v", err))
	}
	if f.N < 2 {
		if _, err := c.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1`, role); err != nil {
			notes = append(notes, fmt.Sprintf("terminate: %v", err))
		}
	}
	c.Close(ctx)
	time.Sleep(f.Dur)
	for i := 0; ; i++ {
		c := w.connect(ctx) // retries while PostgreSQL restarts
		_, err := c.Exec(ctx, grant)
		c.Close(ctx)
		if err == nil {
			break
		}
		if i == 4 {
			w.t.Errorf("the routers' role keeps its revoked right: %v", err)
			notes = append(notes, fmt.Sprintf("restore: %v", err))
			break
		}
		time.Sleep(time.Second)
	}
	w.rec.Event(check.Event{From: from, To: time.Now(), Kind: f.Kind, Note: strings.Join(notes, "; ")})
}
