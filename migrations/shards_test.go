package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestParseShard(t *testing.T) {
	for _, ok := range []struct {
		in   string
		i, n int
	}{{"0/2", 0, 2}, {"3/4", 3, 4}, {" 1 / 64 ", 1, 64}} {
		i, n, err := ParseShard(ok.in)
		if err != nil || i != ok.i || n != ok.n {
			t.Errorf("ParseShard(%q) = %d, %d, %v; want %d, %d", ok.in, i, n, err, ok.i, ok.n)
		}
	}
	for _, bad := range []string{"", "1", "-1/4", "0/1", "0/65", "a/b", "1/4/2"} {
		if _, _, err := ParseShard(bad); err == nil || !strings.Contains(err.Error(), "--shard 0/4 ... --shard 3/4") {
			t.Errorf("ParseShard(%q) = %v, want the form named", bad, err)
		}
	}
	for _, out := range []string{"4/4", "7/4"} {
		if _, _, err := ParseShard(out); err == nil || !strings.Contains(err.Error(), "out of range: the 4 shards of 4 are numbered from 0 to 3") {
			t.Errorf("ParseShard(%q) = %v, want the range named", out, err)
		}
	}
}

func serverVersion(t *testing.T, c *pgx.Conn) int {
	t.Helper()
	var v int
	if err := c.QueryRow(context.Background(), `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestShardsRefusedBeforePostgreSQL15: on PostgreSQL 14 (the version matrix runs this suite there too),
// migrate --shards and run --shard are refused with the version named; from 15 on they are accepted.
func TestShardsRefusedBeforePostgreSQL15(t *testing.T) {
	ctx := context.Background()
	c := migrated(t)
	err := ApplyShards(ctx, c, Config{}, 2)
	if serverVersion(t, c) >= 150000 {
		if err != nil {
			t.Fatalf("ApplyShards on PostgreSQL 15+: %v", err)
		}
		return
	}
	var p *Problem
	if !errors.As(err, &p) || !strings.Contains(p.Msg, "they came with PostgreSQL 15") {
		t.Fatalf("ApplyShards on PostgreSQL 14 = %v, want a Problem naming PostgreSQL 15", err)
	}
	exec(t, c, `CREATE PUBLICATION cdc_router_outbox_shard_0_of_2 FOR TABLE outbox WITH (publish = 'insert')`)
	problem(t, c, Config{Publication: "cdc_router_outbox_shard_0_of_2"}, "--shard 0/2 needs publication row filters", "PostgreSQL 15")
}

// TestShardsPartitionTheAggregates: every key falls in exactly one of the N shards' filters, as
// PostgreSQL evaluates them, and the shards are about even.
func TestShardsPartitionTheAggregates(t *testing.T) {
	c := migrated(t)
	if serverVersion(t, c) < 150000 {
		t.Log("PostgreSQL 14: no row filters (TestShardsRefusedBeforePostgreSQL15 covers it)")
		return
	}
	ctx := context.Background()
	const n, keys = 4, 20000
	var sum []string
	for i := range n {
		sum = append(sum, fmt.Sprintf("(%s)::int", ShardFilter(i, n)))
	}
	var notOne int
	counts := make([]int, n)
	err := c.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE %s <> 1) FROM (SELECT 'order' AS aggregate_type,
		md5(g::text) AS aggregate_id FROM generate_series(1, %d) g) s`, strings.Join(sum, " + "), keys)).Scan(&notOne)
	if err != nil {
		t.Fatal(err)
	}
	if notOne != 0 {
		t.Errorf("%d keys are in no shard or in several", notOne)
	}
	for i := range n {
		err := c.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FROM (SELECT 'order' AS aggregate_type, md5(g::text) AS aggregate_id
			FROM generate_series(1, %d) g) s WHERE %s`, keys, ShardFilter(i, n))).Scan(&counts[i])
		if err != nil {
			t.Fatal(err)
		}
		if counts[i] < keys/n*9/10 || counts[i] > keys/n*11/10 {
			t.Errorf("shard %d holds %d of %d keys, more than 10 %% off even", i, counts[i], keys)
		}
	}
	t.Logf("keys per shard: %v", counts)
}

// TestCheckAcceptsOnlyTheShardsOwnFilter: migrate --shards 4 creates four publications that Check accepts
// for their shard; a shard publication with another shard's filter, or none, is refused for a sharded
// run, and a publication with a shard's filter is refused for an unsharded one.
func TestCheckAcceptsOnlyTheShardsOwnFilter(t *testing.T) {
	ctx := context.Background()
	c := migrated(t)
	if serverVersion(t, c) < 150000 {
		t.Log("PostgreSQL 14: no row filters (TestShardsRefusedBeforePostgreSQL15 covers it)")
		return
	}
	for range 2 { // idempotent
		if err := ApplyShards(ctx, c, Config{}, 4); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 {
		if err := Check(ctx, c, Config{Publication: ShardPublication("cdc_router_outbox", i, 4)}); err != nil {
			t.Errorf("Check of shard %d/4: %v", i, err)
		}
	}
	if err := Check(ctx, c, Config{}); err != nil {
		t.Errorf("Check of the unfiltered publication: %v", err)
	}
	if err := ApplyShards(ctx, c, Config{}, 1); err == nil || !strings.Contains(err.Error(), "from 2 to 64") {
		t.Errorf("ApplyShards(1) = %v, want a refusal", err)
	}

	exec(t, c, `ALTER PUBLICATION cdc_router_outbox_shard_1_of_4 SET TABLE outbox WHERE (`+ShardFilter(2, 4)+`)`)
	problem(t, c, Config{Publication: "cdc_router_outbox_shard_1_of_4"}, "which is not the one of shard 1/4",
		`DROP PUBLICATION "cdc_router_outbox_shard_1_of_4"`, "migrate --shards 4")
	if err := ApplyShards(ctx, c, Config{}, 4); err == nil {
		t.Errorf("ApplyShards kept a shard publication with another shard's filter")
	}
	exec(t, c, `ALTER PUBLICATION cdc_router_outbox_shard_1_of_4 SET TABLE outbox WHERE (`+ShardFilter(1, 8)+`)`)
	problem(t, c, Config{Publication: "cdc_router_outbox_shard_1_of_4"}, "which is not the one of shard 1/4")
	exec(t, c, `ALTER PUBLICATION cdc_router_outbox_shard_1_of_4 SET TABLE outbox WHERE (event_type <> 'x')`)
	problem(t, c, Config{Publication: "cdc_router_outbox_shard_1_of_4"}, "which is not the one of shard 1/4")
	exec(t, c, `ALTER PUBLICATION cdc_router_outbox_shard_1_of_4 SET TABLE outbox`)
	problem(t, c, Config{Publication: "cdc_router_outbox_shard_1_of_4"}, "has no row filter", "publish the events of every shard")

	exec(t, c, `CREATE PUBLICATION mine FOR TABLE outbox WHERE (`+ShardFilter(0, 4)+`) WITH (publish = 'insert')`)
	problem(t, c, Config{Publication: "mine"}, "has a shard's row filter", "run it with --shard i/N")
	exec(t, c, `ALTER PUBLICATION mine SET TABLE outbox WHERE (event_type <> 'internal')`)
	if err := Check(ctx, c, Config{Publication: "mine"}); err != nil {
		t.Errorf("a user's own row filter is refused: %v", err)
	}
}

// TestShardsOfAPartitionedOutbox: the shards of a partitioned outbox publish through its root, as the
// unsharded publication does, so Check accepts them.
func TestShardsOfAPartitionedOutbox(t *testing.T) {
	ctx := context.Background()
	c := connect(t)
	if err := Apply(ctx, c, Config{Partitioned: true}); err != nil {
		t.Fatal(err)
	}
	if serverVersion(t, c) < 150000 {
		t.Log("PostgreSQL 14: no row filters (TestShardsRefusedBeforePostgreSQL15 covers it)")
		return
	}
	if err := ApplyShards(ctx, c, Config{}, 2); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := Check(ctx, c, Config{Publication: ShardPublication("cdc_router_outbox", i, 2)}); err != nil {
			t.Errorf("Check of shard %d/2 of a partitioned outbox: %v", i, err)
		}
	}
}
