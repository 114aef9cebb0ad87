package migrations

import (
	"context"
	"fmt"
	"strings"
	"testing"
)

// earlierShardFilterText is shard i of n's row filter as cdc-router wrote it before COLLATE "C" and
// coalesce: deployments made with it are upgraded by a re-run of migrate --shards.
func earlierShardFilterText(i, n int) string {
	return fmt.Sprintf("((hashtextextended(aggregate_type || ':' || aggregate_id, 0) & 9223372036854775807) %% %d) = %d", n, i)
}

// TestEveryRowMatchesOneShardNullKeysAndCollations: on the table's own rows, with aggregate_id made
// nullable and the key columns of two different collations ("C" and "POSIX"), every row matches exactly
// one shard's filter, a NULL key shard 0's; Check accepts the shards' publications on that table, and
// the filter of an earlier release (which matched a NULL key in no shard and failed with 42P22 on such
// columns) is refused by Check with the fix named and replaced in place by migrate --shards, no row with a
// non-NULL key changing shard.
func TestEveryRowMatchesOneShardNullKeysAndCollations(t *testing.T) {
	ctx := context.Background()
	c := migrated(t)
	if serverVersion(t, c) < 150000 {
		t.Log("PostgreSQL 14: no row filters (TestShardsRefusedBeforePostgreSQL15 covers it)")
		return
	}
	const n = 3
	exec(t, c, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		SELECT gen_random_uuid(), 'order', md5(g::text), 1, 'created', '{}' FROM generate_series(1, 300) g`)
	before := map[string]int{} // shard of each key under the earlier filter, on the default collation
	for i := range n {
		rows, err := c.Query(ctx, `SELECT aggregate_id FROM outbox WHERE `+earlierShardFilterText(i, n))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			before[id] = i
		}
		rows.Close()
	}
	if len(before) != 300 {
		t.Fatalf("the earlier filters place %d of 300 keys", len(before))
	}
	exec(t, c, `ALTER TABLE outbox ALTER COLUMN aggregate_type TYPE text COLLATE "C",
		ALTER COLUMN aggregate_id TYPE text COLLATE "POSIX"`)
	// An earlier deployment on such a table: shard 1's publication with the earlier filter text.
	exec(t, c, `CREATE PUBLICATION cdc_router_outbox_shard_1_of_3 FOR TABLE outbox WHERE (`+earlierShardFilterText(1, n)+
		`) WITH (publish = 'insert')`)
	if _, err := c.Exec(ctx, `SELECT count(*) FROM outbox WHERE `+earlierShardFilterText(0, n)); err == nil ||
		!strings.Contains(err.Error(), "42P22") {
		t.Fatalf("the earlier filter on key columns of two collations = %v, want 42P22 (as in the walsender)", err)
	}
	problem(t, c, Config{Publication: "cdc_router_outbox_shard_1_of_3"}, "as an earlier cdc-router wrote it",
		"run `cdc-router migrate --shards 3`, which replaces it in place")
	// A router of shard 1 recorded the table's membership (replication's publication checks): the replaced
	// filter is a new pg_publication_rel row, which must not read as a publication gap.
	membership := func() string {
		var rel string
		if err := c.QueryRow(ctx, `SELECT r.oid::text FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
			WHERE p.pubname = 'cdc_router_outbox_shard_1_of_3'`).Scan(&rel); err != nil {
			t.Fatal(err)
		}
		return "publication 1 row 1 table 1 rel " + rel
	}
	exec(t, c, `INSERT INTO cdc_router.publication_checks (slot, ok_at, identities) VALUES ('shard_1',
		now(), jsonb_build_object('public.outbox', '`+membership()+`'))`)
	if err := ApplyShards(ctx, c, Config{}, n); err != nil {
		t.Fatalf("migrate --shards over the earlier filter: %v", err)
	}
	var recorded string
	if err := c.QueryRow(ctx, `SELECT identities->>'public.outbox' FROM cdc_router.publication_checks
		WHERE slot = 'shard_1'`).Scan(&recorded); err != nil {
		t.Fatal(err)
	}
	if want := membership(); recorded != want {
		t.Errorf("the recorded membership after the filter was replaced in place is %q, want %q (else a false gap)", recorded, want)
	}
	for i := range n {
		if err := Check(ctx, c, Config{Publication: ShardPublication("cdc_router_outbox", i, n)}); err != nil {
			t.Errorf("Check of shard %d/%d on key columns of collations C and POSIX: %v", i, n, err)
		}
	}
	// The publication's filter as PostgreSQL stores it, evaluated on the table's real rows.
	var stored string
	if err := c.QueryRow(ctx, `SELECT rowfilter FROM pg_publication_tables WHERE pubname = 'cdc_router_outbox_shard_1_of_3'`).
		Scan(&stored); err != nil {
		t.Fatal(err)
	}
	exec(t, c, `ALTER TABLE outbox ALTER COLUMN aggregate_id DROP NOT NULL`)
	exec(t, c, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		VALUES (gen_random_uuid(), 'order', NULL, 1, 'created', '{}'), (gen_random_uuid(), 'order', NULL, 2, 'created', '{}')`)
	var sum []string
	for i := range n {
		sum = append(sum, fmt.Sprintf("(%s)::int", ShardFilter(i, n)))
	}
	var notOne, nullInZero int
	if err := c.QueryRow(ctx, fmt.Sprintf(`SELECT count(*) FILTER (WHERE coalesce(%s, -1) <> 1),
		count(*) FILTER (WHERE aggregate_id IS NULL AND %s) FROM outbox`, strings.Join(sum, " + "), ShardFilter(0, n))).
		Scan(&notOne, &nullInZero); err != nil {
		t.Fatal(err)
	}
	if notOne != 0 || nullInZero != 2 {
		t.Errorf("%d of 302 rows match other than exactly one shard; %d of the 2 NULL keys in shard 0", notOne, nullInZero)
	}
	for i := range n {
		filter := ShardFilter(i, n)
		if i == 1 {
			filter = stored
		}
		rows, err := c.Query(ctx, `SELECT aggregate_id FROM outbox WHERE aggregate_id IS NOT NULL AND (`+filter+`)`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				t.Fatal(err)
			}
			if before[id] != i {
				t.Errorf("key %s moved from shard %d to shard %d", id, before[id], i)
			}
		}
		rows.Close()
	}
}
