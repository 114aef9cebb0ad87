package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// caughtUp is status's line for a slot no events wait in.
var caughtUp = regexp.MustCompile(`(?m)^\s+caught up: no events wait in the slot`)

// TestResetWaitsForTransactionsInFlight pins issue 35's first finding: events of transactions still open
// or prepared when `reset` runs are not yet in the slot's committed changes, and a new slot starts after
// them. With one open transaction and one prepared transaction, each holding a signed cdc_router.emit
// event, of a stopped router run with --message-prefix: status does not say caught up and names both;
// reset --wait 2s refuses naming both and leaves the slot; a reset that waits while they commit counts
// them and refuses naming the 2 unpublished events (as a reset after the commits does); the next run
// publishes both.
func TestResetWaitsForTransactionsInFlight(t *testing.T) {
	const prefix = "cdc-router.outbox"
	ctx := context.Background()
	e := newStreamEnv(t)
	if out, code := e.cli("migrate", "--emit-function"); code != 0 {
		t.Fatalf("migrate --emit-function: exit %d:\n%s", code, out)
	}
	c := e.consume(e.queue)
	stopRouter(t, e.startStreaming("--message-prefix", prefix))

	emit := func(tx pgx.Tx, version int) string {
		t.Helper()
		var id string
		if err := tx.QueryRow(ctx, `SELECT cdc_router.emit('order', '1', $1::bigint, 'paid', '{}'::jsonb)::text`,
			version).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	connect := func(app string) *pgx.Conn {
		t.Helper()
		conn, err := pgx.Connect(ctx, e.pgURL+"&application_name="+app)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	openConn := connect("inflight_open")
	openTx, err := openConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	openID := emit(openTx, 1)
	openPID := fmt.Sprint(openConn.PgConn().PID())

	gid := "g_" + e.slot
	// A prepared transaction left behind would hold every later slot creation of the suite's cluster.
	t.Cleanup(func() {
		var n int
		if e.db.QueryRow(context.Background(), `SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1`, gid).Scan(&n) == nil && n > 0 {
			e.db.Exec(context.Background(), `ROLLBACK PREPARED '`+gid+`'`)
		}
	})
	prepConn := connect("inflight_prepared")
	prepTx, err := prepConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	preparedID := emit(prepTx, 2)
	if _, err := prepTx.Exec(ctx, `PREPARE TRANSACTION '`+gid+`'`); err != nil {
		t.Fatal(err)
	}

	out, code := e.cli("status", "--slot", e.slot)
	if code != 0 || caughtUp.MatchString(out) || !strings.Contains(out, "not caught up") || !strings.Contains(out, "pid "+openPID) ||
		!strings.Contains(out, "inflight_open") || !strings.Contains(out, "gid '"+gid+"'") {
		t.Errorf("status with an open and a prepared transaction: exit %d, want them named and not caught up:\n%s", code, out)
	}
	out, _ = e.cli("status", "--slot", e.slot, "--json")
	var report struct {
		InFlight []struct {
			Kind string  `json:"kind"`
			PID  *int    `json:"pid"`
			GID  *string `json:"gid"`
		} `json:"transactions_in_flight"`
	}
	if err := json.Unmarshal([]byte(out), &report); err != nil || len(report.InFlight) != 2 {
		t.Errorf("status --json: transactions_in_flight %+v (%v), want the open and the prepared one:\n%s", report.InFlight, err, out)
	}

	began := time.Now()
	out, code = e.cli("reset", "--slot", e.slot, "--wait", "2s")
	if code != 1 || !strings.Contains(out, "pid "+openPID) || !strings.Contains(out, "inflight_open") ||
		!strings.Contains(out, "gid '"+gid+"'") || !strings.Contains(out, "COMMIT PREPARED") ||
		!strings.Contains(out, "nothing was changed") || !e.slotExists(e.slot) {
		t.Errorf("reset --wait 2s with transactions in flight: exit %d, slot kept %v, want a refusal naming both:\n%s",
			code, e.slotExists(e.slot), out)
	}
	t.Logf("reset --wait 2s:\n%s", out)
	if d := time.Since(began); d < 2*time.Second || d > 15*time.Second {
		t.Errorf("reset --wait 2s took %v", d)
	}

	// A reset that waits while both end counts their events.
	cmd := exec.Command(binary(t, e.tags), "reset", "--slot", e.slot, "--wait", "30s")
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+e.pgURL)
	waiting, err := testenv.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(waiting.Kill)
	if !waiting.WaitOutput("waiting", 10*time.Second) {
		t.Fatalf("reset does not say it waits:\n%s", waiting.Output())
	}
	if err := openTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	e.exec(`COMMIT PREPARED '` + gid + `'`)
	code, exited := waiting.Wait(20 * time.Second)
	out = waiting.Output()
	const counted = "still holds 2 unpublished events (0 inserts into the publication's tables, 2 logical decoding messages)"
	if !exited || code != 1 || !strings.Contains(out, counted) || !e.slotExists(e.slot) {
		t.Errorf("reset while both commit: exit %d (exited %v), want the refusal %q:\n%s", code, exited, counted, out)
	}
	t.Logf("reset while both commit:\n%s", out)
	out, code = e.cli("reset", "--slot", e.slot)
	if code != 1 || !strings.Contains(out, counted) {
		t.Errorf("reset after the commits: exit %d, want %q:\n%s", code, counted, out)
	}

	// Stopped only once both arrived: a SIGTERM right after "streaming" stops before the slot's events are read.
	r := e.startStreaming("--message-prefix", prefix)
	c.waitFor(t, []row{{id: openID}, {id: preparedID}}, 30*time.Second)
	stopRouter(t, r)
	out, code = e.cli("status", "--slot", e.slot)
	if code != 0 || !caughtUp.MatchString(out) || strings.Contains(out, "in flight") {
		t.Errorf("status after the run: exit %d, want caught up:\n%s", code, out)
	}
	if out, code = e.cli("reset", "--slot", e.slot); code != 0 || e.slotExists(e.slot) {
		t.Errorf("reset of the drained slot: exit %d:\n%s", code, out)
	}
}
