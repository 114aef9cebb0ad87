package e2e

import (
	"strings"
	"testing"
	"time"
)

// eventuateMessage is Eventuate Tram's message table with a stored generated column that takes the
// aggregate's partition id out of the JSON headers: the workaround a user tries for per-aggregate order.
const eventuateGenerated = `CREATE TABLE gen_outbox (
	id varchar(1000) PRIMARY KEY, destination text NOT NULL, headers text NOT NULL, payload text NOT NULL,
	creation_time bigint,
	partition_id text GENERATED ALWAYS AS (headers::jsonb ->> 'PARTITION_ID') STORED)`

const generatedConfig = "table.field.event.key=partition_id\nroute.by.field=destination\n" +
	"route.topic.replacement=${routedByValue}\ntable.field.event.timestamp=creation_time\n"

// TestGeneratedColumnRefusedBeforePostgres18: on the suite's PostgreSQL (before 18) a mapping that reads a
// generated column is refused at start-up, naming the column and the version that can publish it, instead
// of stopping at the first insert; a generated column the mapping does not read is no problem.
func TestGeneratedColumnRefusedBeforePostgres18(t *testing.T) {
	e := newStreamEnv(t)
	if v := e.scalar(`SELECT current_setting('server_version_num')`); len(v) == 6 && v >= "180000" {
		e = newEnvOn(t, postgresOf(t, 17)) // the matrix runs the suite on 18 too: this needs one before
		e.declare(true, "#")
	}
	e.exec(eventuateGenerated)
	if out, code := e.cli("migrate", "--table", "public.gen_outbox", "--publication", "gen_outbox_pub"); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, out)
	}
	r := e.start("", "--table", "public.gen_outbox", "--publication", "gen_outbox_pub", "--snapshot", "never",
		"--config", writeConfig(t, generatedConfig))
	if code := r.wait(30 * time.Second); code == 0 {
		t.Fatalf("exit 0 for a mapping that reads a generated column")
	}
	for _, s := range []string{"column partition_id of public.gen_outbox is a generated column",
		"pgoutput publishes generated columns only from PostgreSQL 18 on", "this server is PostgreSQL 1",
		`ALTER TABLE "public"."gen_outbox" ALTER COLUMN "partition_id" DROP EXPRESSION`} {
		if !strings.Contains(r.Output(), s) {
			t.Errorf("output lacks %q:\n%s", s, tail(r.Output(), 5))
		}
	}
	c := e.consume(e.queue)
	e.startMapped("gen_outbox", writeConfig(t, "table.field.event.key=id\nroute.by.field=destination\n"))
	e.exec(`INSERT INTO gen_outbox (id, destination, headers, payload) VALUES ('m-1', 'Order', '{"PARTITION_ID": "o-1"}', '{}')`)
	if m := e.deliveriesByID(c, 1)["m-1"]; m.Headers["key"] != "m-1" {
		t.Errorf("headers %v", m.Headers)
	}
}

// TestGeneratedColumnOnPostgres18: on PostgreSQL 18 migrate sets the publication's
// publish_generated_columns = stored for an outbox with a stored generated column, and the column feeds
// the mapping in the initial snapshot and in the stream alike: the key header and the ordering lane come
// from PARTITION_ID. A virtual generated column is refused, naming it.
func TestGeneratedColumnOnPostgres18(t *testing.T) {
	e := newEnvOn(t, postgresOf(t, 18))
	e.declare(true, "#")
	e.exec(eventuateGenerated)
	if out, code := e.cli("migrate", "--table", "public.gen_outbox", "--publication", "gen_outbox_pub"); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, out)
	}
	if got := e.scalar(`SELECT pubgencols::text FROM pg_publication WHERE pubname = 'gen_outbox_pub'`); got != "s" {
		t.Errorf("publish_generated_columns %q after migrate, want s (stored)", got)
	}
	e.exec(`INSERT INTO gen_outbox (id, destination, headers, payload, creation_time) VALUES
		('m-1', 'Order', '{"PARTITION_ID": "o-1", "event-type": "Created"}', '{"n": 1}', 1700000000123)`)
	c := e.consume(e.queue)
	config := writeConfig(t, generatedConfig)
	e.startStreaming("--table", "public.gen_outbox", "--publication", "gen_outbox_pub", "--config", config)
	e.exec(`INSERT INTO gen_outbox (id, destination, headers, payload, creation_time) VALUES
		('m-2', 'Order', '{"PARTITION_ID": "o-2"}', '{"n": 2}', 1700000000456)`)
	got := e.deliveriesByID(c, 2)
	for id, want := range map[string]string{"m-1": "o-1", "m-2": "o-2"} {
		m := got[id]
		if m.Headers["key"] != want || m.RoutingKey != "Order" || string(m.Body) == "" {
			t.Errorf("%s: key header %#v, routing key %q, body %q", id, m.Headers["key"], m.RoutingKey, m.Body)
		}
	}
	if got["m-1"].Headers["x-backfill"] != true || got["m-2"].Headers["x-backfill"] != nil {
		t.Errorf("m-1 should come from the snapshot, m-2 from the stream: %v / %v", got["m-1"].Headers, got["m-2"].Headers)
	}

	e.exec(`CREATE TABLE virt_outbox (id text PRIMARY KEY, destination text NOT NULL, headers text NOT NULL,
		payload text NOT NULL, creation_time bigint, partition_id text GENERATED ALWAYS AS (headers::jsonb ->> 'PARTITION_ID') VIRTUAL)`)
	if out, code := e.cli("migrate", "--table", "public.virt_outbox", "--publication", "virt_outbox_pub"); code != 0 {
		t.Fatalf("migrate: exit %d: %s", code, out)
	}
	r := e.start("", "--table", "public.virt_outbox", "--publication", "virt_outbox_pub", "--slot", "virt_slot",
		"--snapshot", "never", "--config", config)
	if code := r.wait(30 * time.Second); code == 0 || !strings.Contains(r.Output(),
		"column partition_id of public.virt_outbox is a virtual generated column, which PostgreSQL never publishes") {
		t.Errorf("virtual generated column: exit %d:\n%s", code, tail(r.Output(), 5))
	}
}
