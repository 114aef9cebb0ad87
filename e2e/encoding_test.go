package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

// sqlASCIIDatabase creates a database with ENCODING 'SQL_ASCII' in the test cluster, which stores any
// bytes in text and json without checking them, and returns its URL. Its slots are dropped at the end.
func sqlASCIIDatabase(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name := testenv.Name(t)
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, `CREATE DATABASE `+name+
		` ENCODING 'SQL_ASCII' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropSlotsOf(pg.URL("postgres"), name) })
	return pg.URL(name)
}

// dropSlotsOf drops the replication slots of database db, ending the walsenders that hold them.
func dropSlotsOf(adminURL, db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, adminURL)
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for i := 0; i < 50; i++ {
		var left int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, db).Scan(&left); err != nil || left == 0 {
			return
		}
		c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active`, db)
		c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, db)
		time.Sleep(100 * time.Millisecond)
	}
}

// newEnvIn is newEnv for a database the test created itself (pgURL): migrated, with the other table, and
// named after the database.
func newEnvIn(t testing.TB, pgURL string) *env {
	t.Helper()
	ctx := context.Background()
	name := pgURL[strings.LastIndex(pgURL, "/")+1:]
	name = name[:strings.Index(name, "?")]
	e := &env{t: t, pgURL: pgURL, amqpURL: testenv.AMQPURL(t), slot: name, exchange: "x_" + name, queue: "q_" + name}
	var err error
	if e.db, err = pgx.Connect(ctx, pgURL); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.db.Close(context.Background()) })
	if err := migrations.Apply(ctx, e.db, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	e.exec(`CREATE TABLE other (id bigserial PRIMARY KEY, note text)`)
	t.Cleanup(e.deleteTopology)
	return e
}

// TestSQLASCIIRowWithInvalidUTF8IsQuarantined: in a SQL_ASCII database a row can hold bytes that are not
// UTF-8. Such a bad row used to make the quarantine INSERT fail (encoding/json writes U+2028 as \u2028,
// which jsonb refuses in a SQL_ASCII database, and the invalid bytes had no valid form), so the stream
// restarted forever at that row and nothing after it arrived. It is now quarantined once and the stream
// goes on.
func TestSQLASCIIRowWithInvalidUTF8IsQuarantined(t *testing.T) {
	e := newEnvIn(t, sqlASCIIDatabase(t))
	e.declare(true, "#")
	c := e.consume(e.queue)
	r := e.startStreaming()
	marker := "ascii-secret-" + uuid()
	bad := uuid()
	// E'\xff' is the byte 0xff (not UTF-8); E'\xe2\x80\xa8' is U+2028 LINE SEPARATOR in UTF-8.
	e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES ($1, 'order', E'bad-\xe2\x80\xa8-\xff', 1, E'created\xff',
		        ('{"secret": "`+marker+`", "raw": "' || E'\xff\xe2\x80\xa8' || '"}')::jsonb, '[1]')`, bad)
	w := newWriter(t, e.pgURL, 3)
	w.write(20, 5, 0)
	c.waitFor(t, w.rows, 30*time.Second)
	e.waitAckedTo(e.currentLSN(), 30*time.Second)
	if got := c.snapshot(); len(got) != len(w.rows) {
		t.Errorf("%d deliveries, want the %d good rows only", len(got), len(w.rows))
	}
	e.expectQuarantined(bad)
	aggID := e.scalar(`SELECT row_values->>'aggregate_id' FROM cdc_router.quarantine`)
	if !strings.Contains(aggID, "\u2028") {
		t.Errorf("stored aggregate_id %q lost its U+2028", aggID)
	}
	notes := e.scalar(`SELECT value_notes::text FROM cdc_router.quarantine`)
	if flag := e.scalar(`SELECT value_notes->'event_type'->>'invalid_utf8' FROM cdc_router.quarantine`); flag != "true" {
		t.Errorf("value_notes %s does not say that event_type was not UTF-8", notes)
	}
	t.Logf("quarantined in a SQL_ASCII database: aggregate_id stored as %q, value_notes %s", aggID, notes)
	expectCleanLog(t, r, marker)
	out, _ := e.cli("status", "--slot", e.slot)
	if !strings.Contains(out, "quarantined rows: 1") || !strings.Contains(out, "slot active:      yes") {
		t.Errorf("status:\n%s", out)
	}
}
