package migrations

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func partitioned(t *testing.T, ahead int) (*pgx.Conn, Config) {
	t.Helper()
	c := connect(t)
	cfg := Config{Partitioned: true, PartitionInterval: "month", PartitionsAhead: ahead}
	if err := Apply(context.Background(), c, cfg); err != nil {
		t.Fatalf("Apply partitioned: %v", err)
	}
	return c, cfg
}

func scalar[T any](t *testing.T, c *pgx.Conn, sql string, args ...any) T {
	t.Helper()
	var v T
	if err := c.QueryRow(context.Background(), sql, args...).Scan(&v); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return v
}

// after is the text of msg after marker: the SQL a Problem ends with.
func after(t *testing.T, msg, marker string) string {
	t.Helper()
	_, rest, ok := strings.Cut(msg, marker)
	if !ok {
		t.Fatalf("no %q in %q", marker, msg)
	}
	return rest
}

// partitions lists the partitions of public.outbox with their bounds, in bound order.
func partitions(t *testing.T, c *pgx.Conn) []string {
	t.Helper()
	return scalar[[]string](t, c, `SELECT coalesce(array_agg(c.relname || ' ' || pg_get_expr(c.relpartbound, c.oid)
		ORDER BY c.relname), '{}') FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'public.outbox'::regclass`)
}

// TestPartitionedMigrateCreatesARangePartitionedOutbox: `migrate --partitioned` makes a partitioned outbox
// with the current month, the next ones and a default partition, published through its root; applied
// again it changes nothing, and the setup check accepts it.
func TestPartitionedMigrateCreatesARangePartitionedOutbox(t *testing.T) {
	ctx := context.Background()
	c, cfg := partitioned(t, 2)
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
	if kind := scalar[string](t, c, `SELECT relkind::text FROM pg_class WHERE oid = 'public.outbox'::regclass`); kind != "p" {
		t.Fatalf("outbox relkind = %s, want p", kind)
	}
	parts := partitions(t, c)
	t.Logf("partitions: %q", parts)
	if len(parts) != 4 || parts[0] != "outbox_default DEFAULT" {
		t.Fatalf("partitions = %q, want 3 monthly ones and outbox_default", parts)
	}
	month := scalar[string](t, c, `SELECT to_char(date_trunc('month', now() AT TIME ZONE 'UTC'), 'YYYYMMDD')`)
	if !strings.HasPrefix(parts[1], "outbox_p"+month+" FOR VALUES FROM ('") {
		t.Errorf("first partition = %q, want outbox_p%s from the start of this month", parts[1], month)
	}
	if !scalar[bool](t, c, `SELECT pubviaroot FROM pg_publication WHERE pubname = 'cdc_router_outbox'`) {
		t.Error("publication created without publish_via_partition_root")
	}
	if got := scalar[[]string](t, c, `SELECT array_agg(tablename::text) FROM pg_publication_tables WHERE pubname = 'cdc_router_outbox'`); len(got) != 1 || got[0] != "outbox" {
		t.Errorf("publication tables = %q, want the root only", got)
	}
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check: %v", err)
	}
	exec(t, c, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', 'o-1', 1, 'created', '{}')`)
	if leaf := scalar[string](t, c, `SELECT tableoid::regclass::text FROM outbox`); leaf != "outbox_p"+month {
		t.Errorf("a row of now went to %s, want outbox_p%s", leaf, month)
	}
}

// TestPartitionedMigrateAddsTheComingPartitions: run again with more partitions ahead (as from cron), it
// adds the missing ones and keeps the rest.
func TestPartitionedMigrateAddsTheComingPartitions(t *testing.T) {
	c, cfg := partitioned(t, 1)
	if n := len(partitions(t, c)); n != 3 {
		t.Fatalf("%d partitions, want 2 and the default", n)
	}
	cfg.PartitionsAhead = 4
	if err := Apply(context.Background(), c, cfg); err != nil {
		t.Fatal(err)
	}
	if n := len(partitions(t, c)); n != 6 {
		t.Fatalf("%d partitions after 4 ahead, want 5 and the default: %q", n, partitions(t, c))
	}
	day := Config{Partitioned: true, PartitionInterval: "day", PartitionsAhead: 2}
	if err := Apply(context.Background(), c, day); err != nil { // overlaps this month's partition: skipped
		t.Fatalf("Apply daily partitions inside monthly ones: %v", err)
	}
	if n := len(partitions(t, c)); n != 6 {
		t.Fatalf("%d partitions after daily ones that overlap, want 6: %q", n, partitions(t, c))
	}
}

// TestPartitionedMigrateRefusesAPlainOutbox: --partitioned never converts a table; it says so and names
// the document that does.
func TestPartitionedMigrateRefusesAPlainOutbox(t *testing.T) {
	c := migrated(t)
	err := Apply(context.Background(), c, Config{Partitioned: true})
	var p *Problem
	if !errors.As(err, &p) || !strings.Contains(p.Msg, "exists and is not partitioned") || !strings.Contains(p.Msg, "docs/partitioning.md") {
		t.Fatalf("Apply --partitioned on a plain outbox = %v, want a Problem naming docs/partitioning.md", err)
	}
	if _, err := Statements(Config{Partitioned: true, PartitionInterval: "year"}); err == nil || !strings.Contains(err.Error(), "use day, week or month") {
		t.Errorf("Statements with interval year = %v, want a refusal", err)
	}
}

// TestPartitionedMigrateRefusesRowsInTheDefaultPartition: a row beyond the partitions lands in the default
// partition; creating its month is then refused with the procedure, and the documented procedure
// (docs/partitioning.md, "Rows in the default partition") moves it so that the next run succeeds.
func TestPartitionedMigrateRefusesRowsInTheDefaultPartition(t *testing.T) {
	ctx := context.Background()
	c, cfg := partitioned(t, 0)
	exec(t, c, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, occurred_at)
		VALUES (gen_random_uuid(), 'order', 'o-1', 1, 'created', '{}', date_trunc('month', now()) + interval '40 days')`)
	cfg.PartitionsAhead = 2
	err := Apply(ctx, c, cfg)
	var p *Problem
	if !errors.As(err, &p) || !strings.Contains(p.Msg, "default partition of public.outbox holds rows") ||
		!strings.Contains(p.Msg, "Rows in the default partition") {
		t.Fatalf("Apply = %v, want the rows in the default partition named", err)
	}
	t.Logf("Problem: %s", p.Msg)
	var lo, hi, name string
	err = c.QueryRow(ctx, `SELECT (date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month')::text || '+00',
		(date_trunc('month', now() AT TIME ZONE 'UTC') + interval '2 months')::text || '+00',
		'outbox_p' || to_char(date_trunc('month', now() AT TIME ZONE 'UTC') + interval '1 month', 'YYYYMMDD')`).Scan(&lo, &hi, &name)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, c, `BEGIN;
		CREATE TABLE public.`+name+` (LIKE public.outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS);
		WITH moved AS (DELETE FROM public.outbox_default WHERE occurred_at >= '`+lo+`' AND occurred_at < '`+hi+`' RETURNING *)
		INSERT INTO public.`+name+` SELECT * FROM moved;
		ALTER TABLE public.outbox ATTACH PARTITION public.`+name+` FOR VALUES FROM ('`+lo+`') TO ('`+hi+`');
		COMMIT`)
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatalf("Apply after the procedure: %v", err)
	}
	if leaf := scalar[string](t, c, `SELECT tableoid::regclass::text FROM outbox`); leaf != name {
		t.Errorf("the moved row is in %s, want %s", leaf, name)
	}
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check: %v", err)
	}
}

// TestPartitionedCheckWantsPublishViaRoot: a publication of the partitioned outbox without
// publish_via_partition_root would send inserts under the partitions' names; the check refuses it with the
// ALTER PUBLICATION that fixes it, and accepts the result.
func TestPartitionedCheckWantsPublishViaRoot(t *testing.T) {
	c, _ := partitioned(t, 1)
	exec(t, c, "ALTER PUBLICATION cdc_router_outbox SET (publish_via_partition_root = false)")
	msg := problem(t, c, Config{}, `ALTER PUBLICATION "cdc_router_outbox" SET (publish_via_partition_root = true)`,
		"names of its partitions")
	exec(t, c, after(t, msg, "refuses: "))
	if err := Check(context.Background(), c, Config{}); err != nil {
		t.Fatalf("Check after the fix: %v", err)
	}
	// A publication created by hand, the way most are, also without the option.
	exec(t, c, "DROP PUBLICATION cdc_router_outbox; CREATE PUBLICATION cdc_router_outbox FOR TABLE outbox WITH (publish = 'insert')")
	problem(t, c, Config{}, "publish_via_partition_root = true")
}

// TestPartitionedCheckAcceptsTheKeyAPartitionedTableCanHave: a unique key of a partitioned outbox must
// include occurred_at; without one the check names the ALTER that works on a partitioned table, and
// accepts it, or a unique index of another order, once it exists.
func TestPartitionedCheckAcceptsTheKeyAPartitionedTableCanHave(t *testing.T) {
	ctx := context.Background()
	c, _ := partitioned(t, 1)
	dropUnique := func() {
		name := scalar[string](t, c, `SELECT conname::text FROM pg_constraint WHERE conrelid = 'outbox'::regclass AND contype = 'u'`)
		exec(t, c, `ALTER TABLE outbox DROP CONSTRAINT "`+name+`"`)
	}
	dropUnique()
	msg := problem(t, c, Config{}, `ALTER TABLE "public"."outbox" ADD UNIQUE (aggregate_type, aggregate_id, aggregate_version, occurred_at)`)
	exec(t, c, after(t, msg, "partition key): "))
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check after the fix: %v", err)
	}
	dropUnique()
	exec(t, c, "CREATE UNIQUE INDEX ON outbox (occurred_at, aggregate_type, aggregate_id, aggregate_version)")
	if err := Check(ctx, c, Config{}); err != nil {
		t.Fatalf("Check with a unique index in another order: %v", err)
	}
	exec(t, c, "ALTER TABLE outbox DROP CONSTRAINT outbox_pkey, ALTER COLUMN occurred_at DROP NOT NULL")
	problem(t, c, Config{}, "allows NULL in occurred_at", "ALTER COLUMN occurred_at SET NOT NULL")
}

// TestPartitionedCheckRefusesAnExpressionKey: a table partitioned by an expression can have no unique key.
func TestPartitionedCheckRefusesAnExpressionKey(t *testing.T) {
	c := migrated(t)
	exec(t, c, `DROP PUBLICATION cdc_router_outbox; DROP TABLE outbox;
		CREATE TABLE outbox (id uuid NOT NULL, aggregate_type text NOT NULL, aggregate_id text NOT NULL,
			aggregate_version bigint NOT NULL, event_type text NOT NULL, schema_version int NOT NULL DEFAULT 1,
			payload jsonb NOT NULL, headers jsonb NOT NULL DEFAULT '{}', occurred_at timestamptz NOT NULL DEFAULT now())
			PARTITION BY RANGE ((aggregate_version / 1000));
		CREATE PUBLICATION cdc_router_outbox FOR TABLE outbox WITH (publish = 'insert', publish_via_partition_root = true)`)
	problem(t, c, Config{}, "partitioned by an expression", "PARTITION BY RANGE (occurred_at)")
}

// TestPartitionedMigrateQuotesNames: a table name that needs quoting, and holds a dollar-quote delimiter,
// gets a partitioned outbox, partitions and publication that the check accepts.
func TestPartitionedMigrateQuotesNames(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	exec(t, c, `CREATE SCHEMA "App's"`)
	cfg := Config{Table: `App's.Out"box $$`, Publication: `Pub "x"`, Partitioned: true, PartitionInterval: "week", PartitionsAhead: 1}
	for i := 0; i < 2; i++ {
		if err := Apply(ctx, c, cfg); err != nil {
			t.Fatalf("Apply #%d: %v", i+1, err)
		}
	}
	if err := Check(ctx, c, cfg); err != nil {
		t.Fatalf("Check: %v", err)
	}
	parts := scalar[[]string](t, c, `SELECT array_agg(c.relname::text ORDER BY c.relname) FROM pg_inherits i
		JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = '"App''s"."Out""box $$"'::regclass`)
	if len(parts) != 3 || parts[0] != `Out"box $$_default` || !strings.HasPrefix(parts[1], `Out"box $$_p`) {
		t.Fatalf("partitions %q, want 2 weekly ones and the default", parts)
	}
}

// TestPartitionedMigrateDoesNotHoldUpWriters: while a long transaction reads the outbox (as the router's
// initial snapshot does), adding a partition would queue an ACCESS EXCLUSIVE lock that every insert waits
// behind; migrate gives up after its lock_timeout instead, names the cause, and changes nothing.
func TestPartitionedMigrateDoesNotHoldUpWriters(t *testing.T) {
	ctx := context.Background()
	c, cfg := partitioned(t, 0)
	reader, err := pgx.Connect(ctx, c.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT count(*) FROM outbox"); err != nil {
		t.Fatal(err)
	}
	before := len(partitions(t, c))
	cfg.PartitionsAhead = 2
	began := time.Now()
	err = Apply(ctx, c, cfg)
	var p *Problem
	if !errors.As(err, &p) || !strings.Contains(p.Msg, "within 5 s") || !strings.Contains(p.Msg, "again later") {
		t.Fatalf("Apply while a transaction reads the outbox = %v, want the lock refusal", err)
	}
	t.Logf("refused after %v: %s", time.Since(began).Round(time.Millisecond), p.Msg)
	if n := len(partitions(t, c)); n != before {
		t.Errorf("%d partitions after the refusal, want %d", n, before)
	}
	tx.Rollback(ctx)
	if err := Apply(ctx, c, cfg); err != nil {
		t.Fatalf("Apply after the transaction ended: %v", err)
	}
	if got := scalar[string](t, c, "SHOW lock_timeout"); got != "0" {
		t.Errorf("lock_timeout after migrate = %s, want the session's own (0)", got)
	}
}
