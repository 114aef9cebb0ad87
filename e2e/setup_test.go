package e2e

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// asRouterRole creates a role with the rights docs/howto/set-up-the-database.md gives the router's role (as the owner of
// the outbox, after migrate), then runs each of revoke (with %s for the role), and returns this database's
// URL for that role. Roles are cluster-wide: the name is unique to the test and the role is dropped at the end.
func (e *env) asRouterRole(revoke ...string) string {
	e.t.Helper()
	role := "r_" + e.slot
	e.exec(`CREATE ROLE ` + role + ` LOGIN REPLICATION`)
	e.t.Cleanup(func() {
		ctx := context.Background()
		e.db.Exec(ctx, `DROP OWNED BY `+role)
		e.db.Exec(ctx, `DROP ROLE `+role)
	})
	for _, grant := range append([]string{
		`GRANT USAGE ON SCHEMA public TO %s`,
		`GRANT SELECT ON public.outbox TO %s`,
		`GRANT USAGE ON SCHEMA cdc_router TO %s`,
		`GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA cdc_router TO %s`,
		`GRANT USAGE ON ALL SEQUENCES IN SCHEMA cdc_router TO %s`,
	}, revoke...) {
		e.exec(fmt.Sprintf(grant, role))
	}
	u, err := url.Parse(e.pgURL)
	if err != nil {
		e.t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

// as is a copy of the env whose router connects with pgURL.
func (e *env) as(pgURL string) *env {
	c := *e
	c.pgURL = pgURL
	return &c
}

// expectSetupRefusal starts the router and expects it to exit 1 within seconds, its last line one sentence
// that contains every one of want, and to have created no slot and recorded no snapshot job.
func (e *env) expectSetupRefusal(want ...string) {
	e.t.Helper()
	began := time.Now()
	r := e.start("")
	code := r.wait(30 * time.Second)
	took := time.Since(began)
	out := strings.TrimSpace(r.Output())
	last := out[strings.LastIndex(out, "\n")+1:]
	if code != 1 || !strings.HasPrefix(last, "cdc-router run: ") {
		e.t.Fatalf("exit %d after %v, output:\n%s\nwant exit 1 with a last line `cdc-router run: ...`", code, took, tail(out, 10))
	}
	for _, w := range want {
		if !strings.Contains(last, w) {
			e.t.Errorf("the refusal does not name %q: %s", w, last)
		}
	}
	if took > 10*time.Second {
		e.t.Errorf("refused after %v, want a refusal within seconds, not after retries", took.Round(time.Millisecond))
	}
	if strings.Contains(out, "goroutine ") {
		e.t.Errorf("the output has a stack:\n%s", out)
	}
	if n := e.scalar(`SELECT count(*)::text FROM pg_replication_slots WHERE database = current_database()`); n != "0" {
		e.t.Errorf("the refusing router left %s replication slots", n)
	}
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.snapshots`); n != "0" {
		e.t.Errorf("the refusing router recorded %s snapshot jobs", n)
	}
	e.t.Logf("refused in %v: %s", took.Round(time.Millisecond), last)
}

// TestLeastPrivilegeRoleFromTheDocsStreams: the role docs/howto/set-up-the-database.md describes streams and can write a
// quarantine record. It shows that each refusal below comes from the one right the test takes away.
func TestLeastPrivilegeRoleFromTheDocsStreams(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 3)
	w.prefill(10, "")
	as := e.as(e.asRouterRole())
	as.startStreaming()
	bad := uuid()
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES ($1, 'order', 'bad', 1, 'created', '{}', '[1]')`, bad)
	w.write(10, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	e.waitAckedTo(e.currentLSN(), 30*time.Second)
	e.expectQuarantined(bad)
}

// TestSetupRefusalWithoutUsageOnTheQuarantineSequence: without USAGE on the sequence behind quarantine.id,
// the first bad row used to stall the stream (the start-up checks did not look). The start is now refused.
func TestSetupRefusalWithoutUsageOnTheQuarantineSequence(t *testing.T) {
	e := newStreamEnv(t)
	seq := e.scalar(`SELECT pg_get_serial_sequence('cdc_router.quarantine', 'id')`)
	as := e.as(e.asRouterRole(`REVOKE USAGE ON SEQUENCE ` + seq + ` FROM %s`))
	as.expectSetupRefusal("GRANT USAGE", seq[strings.Index(seq, ".")+1:])
}

// TestSetupRefusalWithoutSelectOnTheOutbox: a role that cannot read the outbox used to create the slot and
// record the initial snapshot job, then fail on the snapshot's SELECT and retry for ~40 s. The start is now
// refused before either.
func TestSetupRefusalWithoutSelectOnTheOutbox(t *testing.T) {
	e := newStreamEnv(t)
	as := e.as(e.asRouterRole(`REVOKE SELECT ON public.outbox FROM %s`))
	as.expectSetupRefusal("GRANT SELECT", "outbox")
}

// TestSetupRefusalOfANullableKeyColumn: from the second snapshot page on, the keyset predicate is NULL for
// rows with a NULL key and they were skipped; a nullable key column used to pass the setup check.
func TestSetupRefusalOfANullableKeyColumn(t *testing.T) {
	e := newStreamEnv(t)
	e.exec(`ALTER TABLE outbox ALTER COLUMN aggregate_id DROP NOT NULL`)
	e.expectSetupRefusal("aggregate_id", "SET NOT NULL")
}

// newEnvOnCluster is newEnv in a new database of another cluster p, which is closed when the test ends.
func newEnvOnCluster(t testing.TB, p *testenv.Postgres) *env {
	t.Helper()
	t.Cleanup(p.Close) // registered first, so it runs after the cleanups of the database and the router
	e := newEnvIn(t, p.NewDatabase(t))
	e.declare(true, "#")
	return e
}

// TestSetupRefusalWithoutReplicationSlots: max_replication_slots = 0 used to end in a raw error after ~40 s
// of retries.
func TestSetupRefusalWithoutReplicationSlots(t *testing.T) {
	p, err := testenv.StartPostgres("max_replication_slots=0")
	if err != nil {
		t.Fatal(err)
	}
	newEnvOnCluster(t, p).expectSetupRefusal("max_replication_slots")
}

// TestSetupRefusalWithoutWALSenders: max_wal_senders = 0 leaves no walsender for the stream.
func TestSetupRefusalWithoutWALSenders(t *testing.T) {
	p, err := testenv.StartPostgres("max_wal_senders=0")
	if err != nil {
		t.Fatal(err)
	}
	newEnvOnCluster(t, p).expectSetupRefusal("max_wal_senders")
}

// TestSetupRefusalWhenAllSlotsAreInUse: with max_replication_slots = 1 and one slot already there, slot
// creation fails with SQLSTATE 53400, which used to be retried for ~40 s before a raw error.
func TestSetupRefusalWhenAllSlotsAreInUse(t *testing.T) {
	p, err := testenv.StartPostgres("max_replication_slots=1")
	if err != nil {
		t.Fatal(err)
	}
	e := newEnvOnCluster(t, p)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot('occupied', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	e.expectSetupRefusal("max_replication_slots")
}

// TestWritesRevokedWhileStreamingStopNamingTheGrant: a running router whose role loses INSERT and UPDATE
// on its positions table (a DBA's REVOKE) used to stop with PostgreSQL's "permission denied for table
// positions" and a pointer to the docs (seed 467 of the harness). It now stops with the start-up checks'
// refusal naming the GRANT to run, having stored nothing past what the broker confirmed; given the grant
// back, a new start publishes every event.
func TestWritesRevokedWhileStreamingStopNamingTheGrant(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	w := newWriter(t, e.pgURL, 3)
	as := e.as(e.asRouterRole())
	r := as.startStreaming()
	w.write(10, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	role := "r_" + e.slot
	e.exec(`REVOKE INSERT, UPDATE ON cdc_router.positions FROM ` + role)
	w.write(10, 5, 0)
	code := r.wait(60 * time.Second)
	out := strings.TrimSpace(r.Output())
	last := out[strings.LastIndex(out, "\n")+1:]
	t.Logf("exit %d: %s", code, last)
	want := `GRANT INSERT, UPDATE ON "cdc_router"."positions" TO "` + role + `"`
	if code != 1 || !strings.Contains(last, want) {
		t.Fatalf("exit %d, last line %q: want exit 1 naming %s", code, last, want)
	}
	if !strings.Contains(out, `level=ERROR msg="exiting: the router does not retry this"`) || !strings.Contains(out, want) {
		t.Errorf("no ERROR line naming %s:\n%s", want, tail(out, 10))
	}
	e.exec(`GRANT INSERT, UPDATE ON cdc_router.positions TO ` + role)
	as.startStreaming()
	expectEveryEventInOrder(t, c, w, "writes on the positions revoked while streaming", 60*time.Second)
}
