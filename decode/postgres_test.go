package decode

import (
	"bytes"
	"context"
	"flag"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

var recordFrames = flag.Bool("record", false, "write the WALData frames TestDecodeFromPostgres receives to testdata/frames")

// cluster is this test binary's PostgreSQL. It starts on first use, so fuzz workers and benchmarks,
// which run TestMain too, start none; TestMain closes it.
var cluster struct {
	once sync.Once
	pg   *testenv.Postgres
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	if cluster.pg != nil {
		cluster.pg.Close()
	}
	os.Exit(code)
}

func postgres(t *testing.T) *testenv.Postgres {
	t.Helper()
	cluster.once.Do(func() { cluster.pg, cluster.err = testenv.StartPostgres() })
	if cluster.err != nil {
		t.Fatalf("start PostgreSQL: %v", cluster.err)
	}
	return cluster.pg
}

// outboxSQL creates the outbox table and a publication of its inserts named after the database.
const outboxSQL = `
CREATE TABLE outbox (
  id uuid PRIMARY KEY, aggregate_type text NOT NULL, aggregate_id text NOT NULL,
  aggregate_version bigint NOT NULL, event_type text NOT NULL, schema_version int NOT NULL DEFAULT 1,
  payload jsonb NOT NULL, headers jsonb NOT NULL DEFAULT '{}', occurred_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (aggregate_type, aggregate_id, aggregate_version));
CREATE TABLE other (id int PRIMARY KEY);`

// recordedTx is one transaction TestDecodeFromPostgres writes: statements run as one implicit transaction,
// or, when copy is set, a COPY … FROM STDIN statement and its text-format data.
type recordedTx struct {
	sql  string
	copy string
}

// recordedTransactions are the transactions TestDecodeFromPostgres writes; recordedConfig and
// checkRecorded state what decoding them must give.
func recordedTransactions() []recordedTx {
	const cols = `id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers, occurred_at`
	return []recordedTx{
		{sql: `INSERT INTO outbox (` + cols + `) VALUES
	   ('00000000-0000-4000-8000-000000000001', 'order', 'o-1', 1, 'OrderPlaced', '{"b":2,"a":1}', '{"trace":"t1"}', '2024-01-02 03:04:05.123456+00'),
	   ('00000000-0000-4000-8000-000000000002', 'order', 'o-1', 2, 'OrderPaid', '[true, null]', DEFAULT, '2024-01-02 03:04:05+05:30');
	 INSERT INTO other VALUES (1);`},
		{sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers) VALUES
	   ('00000000-0000-4000-8000-000000000003', 'order', 'o-2', 1, 'OrderPlaced', '{}', '[1,2]'),
	   ('00000000-0000-4000-8000-000000000004', 'order', 'o-2', 2, 'OrderPlaced', jsonb_build_object('blob', repeat('x', 2000)), '{}'),
	   ('00000000-0000-4000-8000-000000000005', 'order', 'o-2', 3, 'OrderShipped', '{"n": 1.50}', '{}');
	 UPDATE outbox SET event_type = 'Changed'; DELETE FROM other;`},
		{sql: `ALTER TABLE outbox ADD COLUMN note text;
	 INSERT INTO outbox (note, payload, occurred_at, id, aggregate_type, aggregate_id, aggregate_version, event_type, schema_version)
	   VALUES ('extra', '"s"', '2030-06-30 23:59:59.5-03', '00000000-0000-4000-8000-000000000006', 'customer', 'c-1', 7, 'Renamed', 2)`},
		{sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload) VALUES
	   ('00000000-0000-4000-8000-000000000007', 'order', 'o-3', 1, 'Forbidden', '{}')`},
		{sql: `COPY outbox (` + cols + `) FROM STDIN`, copy: "" +
			"00000000-0000-4000-8000-000000000008\torder\to-4\t1\tOrderPlaced\t{\"c\": 1}\t{}\t2024-01-02 03:04:05+00\n" +
			"00000000-0000-4000-8000-000000000009\torder\to-4\t2\tOrderPlaced\t{\"c\": 2}\t[1]\t2024-01-02 03:04:05+00\n" +
			"00000000-0000-4000-8000-000000000010\torder\to-4\t3\tOrderPlaced\t{\"c\": 3}\t{}\t2024-01-02 03:04:05+00\n"},
		{sql: `ALTER TABLE outbox DROP COLUMN headers;
	 INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
	   VALUES ('00000000-0000-4000-8000-000000000011', 'order', 'o-5', 1, 'OrderPlaced', '{}');
	 ALTER TABLE outbox ADD COLUMN headers jsonb NOT NULL DEFAULT '{}'`},
		{sql: `ALTER TABLE outbox ALTER COLUMN aggregate_version TYPE text;
	 INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
	   VALUES ('00000000-0000-4000-8000-000000000012', 'order', 'o-5', 'two', 'OrderPlaced', '{}');
	 DELETE FROM outbox WHERE aggregate_version = 'two';
	 ALTER TABLE outbox ALTER COLUMN aggregate_version TYPE bigint USING aggregate_version::bigint`},
		{sql: `ALTER TABLE outbox RENAME TO outbox_old;
	 INSERT INTO outbox_old (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
	   VALUES ('00000000-0000-4000-8000-000000000013', 'order', 'o-5', 3, 'OrderPlaced', '{}');
	 ALTER TABLE outbox_old RENAME TO outbox`},
		{sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload) VALUES
	   ('00000000-0000-4000-8000-000000000014', 'order', 'o-5', 4, 'OrderPlaced', '{}')`},
	}
}

func TestDecodeFromPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	repl := streamFromPostgres(ctx, t, recordedTransactions())
	frames, rec := streamTransactions(ctx, t, repl, recordedConfig(), len(recordedTransactions()))
	repl.Close(ctx)
	checkRecorded(t, rec)
	if *recordFrames {
		writeFrames(t, frames)
	}
}

// streamFromPostgres creates the outbox and other tables in a new database, a publication of both and a
// slot, writes txs and returns a replication connection streaming them from the slot's start.
func streamFromPostgres(ctx context.Context, t *testing.T, txs []recordedTx) *pgconn.PgConn {
	t.Helper()
	dbURL := postgres(t).NewDatabase(t)
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	slot := strings.TrimPrefix(u.Path, "/") // NewDatabase drops slots named after the database

	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, outboxSQL+`CREATE PUBLICATION `+slot+` FOR TABLE outbox, other WITH (publish = 'insert');`); err != nil {
		t.Fatal(err)
	}
	repl := replicationConn(ctx, t, dbURL)
	if _, err := pglogrepl.CreateReplicationSlot(ctx, repl, slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{SnapshotAction: "NOEXPORT_SNAPSHOT"}); err != nil {
		t.Fatalf("create slot: %v", err)
	}
	t.Cleanup(func() { dropSlot(t, dbURL, slot) })
	for _, tx := range txs {
		if tx.copy != "" {
			_, err = conn.PgConn().CopyFrom(ctx, strings.NewReader(tx.copy), tx.sql)
		} else {
			_, err = conn.Exec(ctx, tx.sql)
		}
		if err != nil {
			t.Fatalf("%s: %v", tx.sql, err)
		}
	}
	err = pglogrepl.StartReplication(ctx, repl, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + slot + "'"}})
	if err != nil {
		t.Fatalf("start replication: %v", err)
	}
	return repl
}

// replicationConn opens a replication=database connection with the session settings the router pins.
func replicationConn(ctx context.Context, t *testing.T, dbURL string) *pgconn.PgConn {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dbURL + "&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{"DateStyle": "ISO", "TimeZone": "UTC", "IntervalStyle": "postgres",
		"extra_float_digits": "3", "bytea_output": "hex"} {
		cfg.RuntimeParams[k] = v
	}
	repl, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("replication connection: %v", err)
	}
	t.Cleanup(func() { repl.Close(context.Background()) })
	return repl
}

// streamTransactions decodes XLogData until n transactions have committed and returns the frames seen.
func streamTransactions(ctx context.Context, t *testing.T, repl *pgconn.PgConn, cfg Config, n int) ([]frame, *recorder) {
	t.Helper()
	d, rec := New(cfg), &recorder{}
	var frames []frame
	var acked cdc.LSN
	for commits := 0; commits < n; {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		raw, err := repl.ReceiveMessage(rctx)
		cancel()
		if pgconn.Timeout(err) && ctx.Err() == nil {
			continue
		}
		if err != nil {
			t.Fatalf("receive after %d commits: %v", commits, err)
		}
		msg, ok := raw.(*pgproto3.CopyData)
		if !ok {
			t.Fatalf("unexpected message %T", raw)
		}
		switch msg.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			pkm, err := pglogrepl.ParsePrimaryKeepaliveMessage(msg.Data[1:])
			if err == nil && pkm.ReplyRequested && acked != 0 {
				err = pglogrepl.SendStandbyStatusUpdate(ctx, repl, pglogrepl.StandbyStatusUpdate{WALWritePosition: pglogrepl.LSN(acked)})
			}
			if err != nil {
				t.Fatal(err)
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(msg.Data[1:])
			if err != nil {
				t.Fatal(err)
			}
			f := frame{cdc.LSN(xld.WALStart), bytes.Clone(xld.WALData)}
			frames = append(frames, f)
			if err := d.Decode(f.walStart, xld.WALData, rec); err != nil {
				t.Fatalf("decode %q at %s: %v", f.data[0], f.walStart, err)
			}
			if f.data[0] == msgCommit {
				commits++
			}
		}
	}
	return frames, rec
}

func dropSlot(t *testing.T, dbURL, slot string) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Errorf("drop slot %s: %v", slot, err)
		return
	}
	defer conn.Close(ctx)
	for ctx.Err() == nil {
		var left int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&left)
		if err == nil && left == 0 {
			return
		}
		conn.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active`, slot)
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("slot %s still exists", slot)
}
