package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestRouterRoleOpensPhysicalReplication (issue 35, finding 5) pins what docs/howto/secure.md says the
// router's credentials open: the REPLICATION attribute is PostgreSQL's only check on a replication=database
// connection, the one the router uses, so the router's role (a non-superuser with the documented grants)
// may stream the cluster's physical WAL over it, every database's changes, not only logical decoding of its
// publication. On a PostgreSQL version that narrowed this, the test fails and the Security table must
// change with it.
func TestRouterRoleOpensPhysicalReplication(t *testing.T) {
	e := newStreamEnv(t)
	role := e.asRouterRole()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sep := "?"
	if strings.Contains(role, "?") {
		sep = "&"
	}
	conn, err := pgconn.Connect(ctx, role+sep+"replication=database")
	if err != nil {
		t.Fatalf("connect as the router's role with replication=database: %v", err)
	}
	defer conn.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'physical', 1, 'created', '{}')`)
	err = startPhysical(ctx, conn, sys.XLogPos)
	if err != nil {
		t.Fatalf("START_REPLICATION PHYSICAL as the router's role was refused (%v): docs/howto/secure.md says it is "+
			"accepted; if this PostgreSQL version narrows REPLICATION, say so there", err)
	}
	// The server streams the WAL from the position: a WAL record (XLogData) or at least a keepalive.
	msg, err := conn.ReceiveMessage(ctx)
	if err != nil {
		t.Fatalf("no physical replication message: %v", err)
	}
	t.Logf("PostgreSQL %s: START_REPLICATION PHYSICAL %s accepted for a non-superuser REPLICATION role over replication=database; first message %T",
		e.scalar(`SHOW server_version`), sys.XLogPos, msg)

	page, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "howto", "secure.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(page), "`START_REPLICATION PHYSICAL`") || !strings.Contains(string(page), "whole cluster") {
		t.Errorf("docs/howto/secure.md no longer says that the router's role may stream the whole cluster's WAL")
	}
}

// startPhysical sends START_REPLICATION PHYSICAL from lsn without a slot (pglogrepl names one always) and
// returns once the server starts streaming (CopyBothResponse), or its refusal.
func startPhysical(ctx context.Context, conn *pgconn.PgConn, lsn pglogrepl.LSN) error {
	conn.Frontend().SendQuery(&pgproto3.Query{String: "START_REPLICATION PHYSICAL " + lsn.String()})
	if err := conn.Frontend().Flush(); err != nil {
		return err
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		switch msg := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyBothResponse:
			return nil
		}
	}
}
