package admin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestInFlightTransactionsAsAnUnprivilegedRole: a role without pg_read_all_stats sees the open
// transaction (with a transaction ID) and the prepared transaction of its database, not another
// database's, nor a transaction that has written nothing; only the open one's state and start are hidden
// from it, and the names say so.
func TestInFlightTransactionsAsAnUnprivilegedRole(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	other := pg.NewDatabase(t)
	connect := func(url string) *pgx.Conn {
		t.Helper()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	su := connect(url)
	db := su.Config().Database
	role := db + "_viewer"
	for _, sql := range []string{`CREATE ROLE ` + role + ` LOGIN`, `CREATE TABLE t (x int)`} {
		if _, err := su.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { su.Exec(context.Background(), `ROLLBACK PREPARED 'g_`+db+`'`) })
	begin := func(c *pgx.Conn, sql string) {
		t.Helper()
		if _, err := c.Exec(ctx, "BEGIN; "+sql); err != nil {
			t.Fatal(err)
		}
	}
	open, idle, prepared, elsewhere := connect(url), connect(url), connect(url), connect(other)
	begin(open, `INSERT INTO t VALUES (1)`)
	begin(idle, `SELECT 1`) // no transaction ID: it has written nothing
	begin(prepared, `INSERT INTO t VALUES (2); PREPARE TRANSACTION 'g_`+db+`'`)
	begin(elsewhere, `CREATE TABLE u (x int)`)

	for _, c := range []struct {
		name    string
		url     string
		visible bool
	}{{"superuser", url, true}, {"unprivileged", strings.Replace(url, "postgres@", role+"@", 1), false}} {
		got, err := InFlightTransactions(ctx, connect(c.url))
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if len(got) != 2 || got[0].Prepared == got[1].Prepared {
			t.Fatalf("%s: %+v, want the open and the prepared transaction", c.name, got)
		}
		o, p := got[0], got[1]
		if o.Prepared {
			o, p = p, o
		}
		if o.PID != int(open.PgConn().PID()) || o.XID == "" || o.User != "postgres" || (o.Started != nil) != c.visible ||
			(o.State == "idle in transaction") != c.visible {
			t.Errorf("%s: open transaction %+v", c.name, o)
		}
		if p.GID != "g_"+db || p.User != "postgres" || p.PreparedAt.IsZero() || p.XID == "" {
			t.Errorf("%s: prepared transaction %+v", c.name, p)
		}
		if hidden := strings.Contains(o.String(), "visible with pg_read_all_stats"); hidden == c.visible {
			t.Errorf("%s: %s", c.name, o)
		}
	}
}

// TestInFlightNamesAndWait: the names an operator reads, the transactions that are still awaited, and
// status's lines and JSON with transactions in flight.
func TestInFlightNamesAndWait(t *testing.T) {
	at := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	open := InFlight{XID: "740", PID: 123, Application: "billing", User: "app", State: "idle in transaction", Started: &at}
	prep := InFlight{Prepared: true, XID: "741", GID: "it's", User: "app", PreparedAt: at}
	for _, c := range []struct {
		t    InFlight
		want string
	}{
		{open, "open transaction pid 123 (xid 740, application billing, user app, idle in transaction, started 2026-05-01T10:00:00Z)"},
		{InFlight{XID: "7", PID: 9, User: "app"}, "open transaction pid 9 (xid 7, user app; its state and start are visible with pg_read_all_stats)"},
		{prep, "prepared transaction gid 'it''s' (xid 741, prepared 2026-05-01T10:00:00Z, owner app)"},
	} {
		if got := c.t.String(); got != c.want {
			t.Errorf("got  %s\nwant %s", got, c.want)
		}
	}
	if left := stillInFlight([]InFlight{open, prep}, []InFlight{prep, {XID: "800"}}); len(left) != 1 || left[0].XID != "741" {
		t.Errorf("still in flight: %+v, want the prepared one only", left)
	}
	many := make([]InFlight, 12)
	if got := InFlightList(many); !strings.HasSuffix(got, "; and 2 more") {
		t.Errorf("list of 12: %s", got)
	}

	r := Report{Slot: "s", Database: "app", SlotExists: true, ConfirmedFlush: 0x1000, Pending: &Unpublished{},
		InFlight: []InFlight{open, prep}}
	text := r.String()
	for _, want := range []string{"not caught up: no events wait in the slot yet, but 2 transactions in flight may still write some",
		"in flight:        2 transactions of this database are open or prepared", "gid 'it''s'"} {
		if !strings.Contains(text, want) {
			t.Errorf("status lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "  caught up") {
		t.Errorf("status says caught up with transactions in flight:\n%s", text)
	}
	for _, c := range []struct {
		r    Report
		want string
	}{
		{r, `"transactions_in_flight":[{"kind":"open","xid":"740","pid":123,"application_name":"billing","user":"app",` +
			`"state":"idle in transaction","started_at":"2026-05-01T10:00:00Z","gid":null,"prepared_at":null},` +
			`{"kind":"prepared","xid":"741","pid":null,"application_name":null,"user":"app","state":null,"started_at":null,` +
			`"gid":"it's","prepared_at":"2026-05-01T10:00:00Z"}]`},
		{Report{Slot: "s"}, `"transactions_in_flight":[]`},
		{Report{Slot: "s", InFlightNote: "permission denied"}, `"transactions_in_flight":null`},
	} {
		b, err := json.Marshal(c.r)
		if err != nil || !strings.Contains(string(b), c.want) {
			t.Errorf("status --json %s (%v), want %s", b, err, c.want)
		}
	}
	r.InFlight, r.InFlightNote = nil, "permission denied for view pg_stat_activity"
	if text := r.String(); strings.Contains(text, "  caught up") || !strings.Contains(text, "in flight:        not known: permission denied") {
		t.Errorf("status with the transactions in flight unknown:\n%s", text)
	}
}
