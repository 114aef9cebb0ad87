package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// twoOutboxes is a streaming test world with a second native outbox, public.outbox_b, made like the first
// (LIKE … INCLUDING ALL keeps the defaults, NOT NULLs and the unique key). When published, it is added to
// the router's publication.
func twoOutboxes(t *testing.T, published bool) *env {
	t.Helper()
	e := newStreamEnv(t)
	e.exec(`CREATE TABLE outbox_b (LIKE outbox INCLUDING ALL)`)
	if published {
		e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE outbox_b`)
	}
	return e
}

// insertVersioned inserts a native outbox row of aggregate agg with version v into table, in tx, and
// returns its id.
func insertVersioned(t *testing.T, tx pgx.Tx, table, agg string, v int) string {
	t.Helper()
	id := uuid()
	_, err := tx.Exec(context.Background(), `INSERT INTO `+table+` (id, aggregate_type, aggregate_id, aggregate_version,
		event_type, payload) VALUES ($1, 'order', $2, $3, 'created', jsonb_build_object('table', $4::text))`, id, agg, v, table)
	if err != nil {
		t.Fatalf("insert into %s: %v", table, err)
	}
	return id
}

// written is one row a test wrote: its event id and the aggregate (ordering key) it belongs to.
type written struct{ key, id string }

// inCommitOrder waits until the consumer holds the events of want and checks that each arrived exactly
// once, nothing else arrived, and the events of each aggregate arrived in the order written (the router's
// order guarantee is per aggregate: other aggregates may pass a held one).
func inCommitOrder(t *testing.T, c *consumer, want []written) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(c.snapshot()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // anything beyond want would arrive now
	keyOf := map[string]string{}
	wantByKey := map[string][]string{}
	for _, w := range want {
		keyOf[w.id] = w.key
		wantByKey[w.key] = append(wantByKey[w.key], w.id)
	}
	gotByKey := map[string][]string{}
	got := c.snapshot()
	for _, d := range got {
		key, ok := keyOf[d.msg.MessageId]
		if !ok {
			t.Errorf("message %s was never written", d.msg.MessageId)
		}
		gotByKey[key] = append(gotByKey[key], d.msg.MessageId)
	}
	if len(got) != len(want) {
		t.Errorf("%d messages, want %d", len(got), len(want))
	}
	for key, ids := range wantByKey {
		if strings.Join(gotByKey[key], " ") != strings.Join(ids, " ") {
			t.Errorf("aggregate %s: delivered\n%s\nwant in commit order\n%s", key, strings.Join(gotByKey[key], "\n"),
				strings.Join(ids, "\n"))
		}
	}
}

// TestTwoNativeOutboxesInCommitOrder: one router reads two native outbox tables of one publication; the
// rows of both, written in one transaction and in alternating transactions, all arrive once, and the
// events of an aggregate written to both tables arrive in commit order.
func TestTwoNativeOutboxesInCommitOrder(t *testing.T) {
	e := twoOutboxes(t, true)
	c := e.consume(e.queue)
	e.startStreaming("--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never")
	ctx := context.Background()
	var want []written
	v := 0
	// One transaction writing both tables, interleaved.
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		for i := range 6 {
			table := []string{"outbox", "outbox_b"}[i%2]
			v++
			want = append(want, written{"agg-1", insertVersioned(t, tx, table, "agg-1", v)})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Alternating transactions, one table each, of two aggregates that both tables carry.
	for i := range 12 {
		table := []string{"outbox_b", "outbox"}[i%2]
		agg := fmt.Sprintf("agg-%d", 2+i/2%2)
		err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
			v++
			want = append(want, written{agg, insertVersioned(t, tx, table, agg, v)})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	inCommitOrder(t, c, want)
}

// TestNativeAndMappedOutboxInOneRouter: a native outbox and a Debezium-shaped one (mapped by a --config
// file that names its table) stream through one router, written in one transaction: every row arrives
// once, each message shaped by its own table's rules, each aggregate's events in commit order.
func TestNativeAndMappedOutboxInOneRouter(t *testing.T) {
	e := newStreamEnv(t)
	e.exec(debeziumTable)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE dbz_outbox`)
	c := e.consume(e.queue)
	config := writeConfig(t, "table=public.dbz_outbox\nroute.topic.replacement=dbz.${routedByValue}\n")
	e.startStreaming("--table", "public.outbox", "--table", "public.dbz_outbox", "--config", config,
		"--snapshot", "never")
	ctx := context.Background()
	var want []written
	mapped := map[string]bool{}
	err := pgx.BeginFunc(ctx, e.db, func(tx pgx.Tx) error {
		for i := range 8 {
			if i%2 == 0 {
				want = append(want, written{"agg-n", insertVersioned(t, tx, "outbox", "agg-n", i+1)})
				continue
			}
			id := uuid()
			if _, err := tx.Exec(ctx, `INSERT INTO dbz_outbox (id, aggregatetype, aggregateid, type, payload)
				VALUES ($1, 'customer', 'c-1', 'CustomerCreated', '{"name": "x"}')`, id); err != nil {
				return err
			}
			want, mapped[id] = append(want, written{"c-1", id}), true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	inCommitOrder(t, c, want)
	for _, d := range c.snapshot() {
		switch {
		case mapped[d.msg.MessageId] && d.msg.RoutingKey != "dbz.customer":
			t.Errorf("mapped row %s: routing key %q, want dbz.customer (its file's route.topic.replacement)", d.msg.MessageId, d.msg.RoutingKey)
		case mapped[d.msg.MessageId] && string(d.msg.Body) != `{"name": "x"}`:
			t.Errorf("mapped row %s: body %s, want the payload column", d.msg.MessageId, d.msg.Body)
		case !mapped[d.msg.MessageId] && d.msg.Headers["aggregate_version"] == nil:
			t.Errorf("native row %s: no aggregate_version header (headers %v): read with the mapping?", d.msg.MessageId, d.msg.Headers)
		case !mapped[d.msg.MessageId] && strings.HasPrefix(d.msg.RoutingKey, "dbz."):
			t.Errorf("native row %s: routing key %q comes from the other table's mapping", d.msg.MessageId, d.msg.RoutingKey)
		}
	}
}

// TestSetupCheckNamesTablesMissingFromThePublication: a second outbox not in the publication is refused at
// start with the ALTER PUBLICATION that adds it; once added, the router streams.
func TestSetupCheckNamesTablesMissingFromThePublication(t *testing.T) {
	e := twoOutboxes(t, false)
	r := e.start("", "--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never")
	r.expectExit(30*time.Second, `publication "cdc_router_outbox" does not contain public.outbox_b`,
		`ALTER PUBLICATION "cdc_router_outbox" ADD TABLE "public"."outbox_b"`)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE outbox_b`)
	e.startStreaming("--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never")
}

// TestSetupCheckRefusesAnotherTableBesideSeveralOutboxes: a publication carrying a table that is none of
// the configured outboxes is refused, naming that table only.
func TestSetupCheckRefusesAnotherTableBesideSeveralOutboxes(t *testing.T) {
	e := twoOutboxes(t, true)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE other`)
	r := e.start("", "--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never")
	r.expectExit(30*time.Second, `also publishes public.other,`, `DROP TABLE "public"."other"`)
	if strings.Contains(r.Output(), "also publishes public.outbox_b") {
		t.Error("the check counts the second outbox as another table")
	}
}

// TestUnconfiguredTableIsDriftBesideSeveralOutboxes: a row of a table that joins the publication while
// the router streams two outboxes is refused before anything of it is published, naming both outboxes.
func TestUnconfiguredTableIsDriftBesideSeveralOutboxes(t *testing.T) {
	e := twoOutboxes(t, true)
	c := e.consume(e.queue)
	r := e.startStreaming("--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never")
	first := e.insertOne("outbox_b", "before")
	c.waitFor(t, []row{{id: first}}, 30*time.Second)
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE other`)
	e.exec(`INSERT INTO other (note) VALUES ('not an event')`)
	r.expectExit(30*time.Second, "into public.other because table public.other is in the publication but is not one of "+
		"the outbox tables public.outbox, public.outbox_b")
	if n := len(c.snapshot()); n != 1 {
		t.Fatalf("%d messages, want only the outbox_b row", n)
	}
}

// TestSeveralTablesCommandLine: the command-line mistakes with several tables get one message naming the fix.
func TestSeveralTablesCommandLine(t *testing.T) {
	e := newEnv(t)
	unnamed := writeConfig(t, "route.by.field=aggregatetype\n")
	elsewhere := writeConfig(t, "table=public.elsewhere\n")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--table", "a", "--table", "b", "--shard", "0/2"}, "--table names 2 tables, which cannot be combined with --shard"},
		{[]string{"run", "--table", "a", "--table", "b", "--snapshot", "never", "--config", unnamed}, "names no table, and --table names 2: add a line table=<schema.table>"},
		{[]string{"run", "--table", "a", "--table", "b", "--snapshot", "never", "--config", elsewhere}, "maps table public.elsewhere, which --table does not name"},
		{[]string{"run", "--table", "a", "--table", "public.a", "--snapshot", "never"}, "table public.a is named twice"},
		{[]string{"migrate", "--table", "a", "--table", "b"}, "`cdc-router migrate` works on one outbox table: run it once per table"},
		{[]string{"status", "--table", "a", "--table", "b"}, "`cdc-router status` works on one outbox table"},
	} {
		out, code := e.cli(c.args...)
		if code != 2 || !strings.Contains(out, c.want) {
			t.Errorf("%s: exit %d, output %q; want exit 2 and %q", strings.Join(c.args, " "), code, out, c.want)
		}
	}
}

// fillOutbox inserts n native rows into table with SQL alone, over 100 aggregates named after the table,
// and returns their ids.
func (e *env) fillOutbox(table string, n int) []string {
	e.t.Helper()
	e.exec(fmt.Sprintf(`INSERT INTO %s (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'order', '%s-' || (g %% 100), g / 100 + 1, 'created', jsonb_build_object('n', g)
		FROM generate_series(0, %d) g`, table, table, n-1))
	rows, err := e.db.Query(context.Background(), `SELECT id::text FROM `+table)
	if err != nil {
		e.t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		e.t.Fatal(err)
	}
	return ids
}

// TestSnapshotOfTwoOutboxesResumesPerTable: the initial snapshot copies both outbox tables (merged in key
// order, which here is one after the other: every aggregate of the first sorts before the second's), with
// progress kept per table and a table's job done as soon as its rows are. Killed while copying the second, the router refuses to stream
// past the unfinished table (with --snapshot never, or with a --table list lacking it), then resumes that
// one from its stored key and does not copy the finished first one again; every row arrives.
func TestSnapshotOfTwoOutboxesResumesPerTable(t *testing.T) {
	e := twoOutboxes(t, true)
	c := e.consume(e.queue)
	first, second := e.fillOutbox("outbox", 10_000), e.fillOutbox("outbox_b", 40_000)
	tables := []string{"--table", "public.outbox", "--table", "public.outbox_b"}
	r := e.start("", tables...)
	jobA, jobB := "initial:"+e.slot+"/public.outbox", "initial:"+e.slot+"/public.outbox_b"
	deadline := time.Now().Add(120 * time.Second)
	var doneAtKill int64
	for doneAtKill < 10_000 {
		if time.Now().After(deadline) {
			t.Fatalf("the second table's snapshot progress stayed at %d rows", doneAtKill)
		}
		time.Sleep(100 * time.Millisecond)
		fmt.Sscan(e.scalar(`SELECT coalesce(max(rows_done), 0)::text FROM cdc_router.snapshots WHERE name = $1`, jobB), &doneAtKill)
	}
	r.signal(syscall.SIGKILL)
	r.wait(10 * time.Second)
	if got := e.scalar(`SELECT state || ' ' || rows_done FROM cdc_router.snapshots WHERE name = $1`, jobA); got != "done 10000" {
		t.Fatalf("the first table's snapshot at the kill: %q, want done 10000", got)
	}
	if got := e.scalar(`SELECT state FROM cdc_router.snapshots WHERE name = $1`, jobB); got != "running" {
		t.Fatalf("the second table's snapshot at the kill: %q, want running", got)
	}
	out, _ := e.cli("status", "--slot", e.slot)
	if !strings.Contains(out, jobA+" done") || !strings.Contains(out, jobB+" interrupted") {
		t.Errorf("status after the kill does not show both tables' snapshots:\n%s", out)
	}
	e.start("", append(tables, "--snapshot", "never")...).expectExit(30*time.Second,
		"the initial snapshot of public.outbox_b (slot "+e.slot+") is unfinished", "start with --snapshot=initial to finish it")
	e.exec(`ALTER PUBLICATION cdc_router_outbox DROP TABLE outbox_b`) // as if the second table were given up
	e.start("").expectExit(30*time.Second, "the initial snapshot "+jobB+" of slot "+e.slot+" is unfinished",
		"start with the --table it began with")
	e.exec(`ALTER PUBLICATION cdc_router_outbox ADD TABLE outbox_b`)
	r2 := e.start("", tables...)
	r2.waitLog("msg=streaming ", 120*time.Second)
	if strings.Contains(r2.Output(), "table=public.outbox ") {
		t.Error("the restart copied the finished first table again")
	}
	if !strings.Contains(r2.Output(), "resuming the initial snapshot in a new snapshot") {
		t.Error("the restart did not resume the second table's snapshot")
	}
	deadline = time.Now().Add(180 * time.Second) // generous: the machine is shared
	n := map[string]int{}
	for len(n) < len(first)+len(second) && time.Now().Before(deadline) {
		time.Sleep(200 * time.Millisecond)
		clear(n)
		for _, d := range c.snapshot() {
			n[d.msg.MessageId]++
		}
	}
	dupsA, dupsB := 0, 0
	for _, ids := range []struct {
		ids  []string
		dups *int
	}{{first, &dupsA}, {second, &dupsB}} {
		for _, id := range ids.ids {
			switch {
			case n[id] == 0:
				t.Fatalf("row %s never arrived (%d of %d rows did)", id, len(n), len(first)+len(second))
			case n[id] > 1:
				*ids.dups++
			}
		}
	}
	t.Logf("snapshot of 10,000 + 40,000 rows killed at %d rows of the second confirmed: %d duplicates of the first, %d of the second",
		doneAtKill, dupsA, dupsB)
	if dupsA != 0 || int64(dupsB) >= doneAtKill {
		t.Errorf("%d duplicates of the first table (want none: it was done), %d of the second (want fewer than the %d "+
			"confirmed at the kill: a resume, not a start over)", dupsA, dupsB, doneAtKill)
	}
	r2.signal(syscall.SIGTERM)
	r2.wait(30 * time.Second)
	if out, code := e.cli("reset", "--slot", e.slot); code != 0 {
		t.Fatalf("reset: exit %d: %s", code, out)
	}
	if n := e.scalar(`SELECT count(*)::text FROM cdc_router.snapshots WHERE name LIKE 'initial:' || $1 || '%'`, e.slot); n != "0" {
		t.Errorf("reset left %s of the slot's snapshot jobs", n)
	}
}

// TestSecondOutboxDroppedFromThePublicationIsNoticed: the check that runs while streaming watches every
// outbox table, not only the first: the second one dropped from the publication makes the router unready
// and is logged with that table's ALTER PUBLICATION and the backfill naming --table.
func TestSecondOutboxDroppedFromThePublicationIsNoticed(t *testing.T) {
	e := twoOutboxes(t, true)
	addr := freeAddr(t)
	r := e.startStreaming("--table", "public.outbox", "--table", "public.outbox_b", "--snapshot", "never", "--http-addr", addr,
		"--publication-check-interval", "500ms")
	time.Sleep(time.Second) // at least one check sees both tables in the publication
	if code, _ := get(t, "http://"+addr+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d while streaming", code)
	}
	e.exec(`ALTER PUBLICATION cdc_router_outbox DROP TABLE outbox_b`)
	r.waitLog("no longer streamed", 10*time.Second)
	for _, want := range []string{`does not contain the outbox table public.outbox_b`,
		`ADD TABLE \"public\".\"outbox_b\"`, "the router names the `cdc-router backfill`"} {
		if !strings.Contains(r.Output(), want) {
			t.Errorf("the router's log lacks %q:\n%s", want, tail(r.Output(), 5))
		}
	}
	if code, body := get(t, "http://"+addr+"/readyz"); code != 503 || !strings.Contains(body, "outbox_b") {
		t.Errorf("/readyz = %d %s, want 503 naming outbox_b", code, body)
	}
}
