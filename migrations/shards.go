package migrations

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// Sharding splits the outbox between N routers, each with its own slot and its own publication, whose row
// filter (PostgreSQL 15+) keeps the inserts of one shard: every aggregate (aggregate_type, aggregate_id)
// belongs to exactly one shard, so its events go through one router, in order. The shard of a row is
// shardKey modulo N: hashtextextended is PostgreSQL's own hash for hash partitioning (immutable, as a
// row filter requires, the same in every walsender of a server and kept by pg_upgrade, since hash-partitioned
// tables rely on it); the mask keeps the hash non-negative without abs(), which fails on the smallest bigint.
// The initial snapshot of a shard's router reads the table under the same predicate (ShardSnapshotWhere).
//
// The key is hashed under COLLATE "C", so the expression is defined whatever the columns' collations (two
// different implicit collations would leave the hash without one: 42P22 in the walsender at every insert);
// for a deterministic collation, which every database default is, hashtextextended hashes the bytes, so the
// value is the one the expression without COLLATE gave and no row changes shard. A NULL key (a column made
// nullable later) hashes to NULL, which coalesce turns into 0: the row belongs to shard 0, whose router
// quarantines it as the unsharded router does, so every row matches exactly one shard's filter.

// MaxShards bounds N: each shard is a walsender that decodes all of the WAL.
const MaxShards = 64

// shardKey is the expression whose value picks the shard of a row.
const shardKey = `(coalesce(hashtextextended((aggregate_type || ':' || aggregate_id) COLLATE "C", 0), 0) & 9223372036854775807)`

// ShardFilter is the row filter of shard i of n.
func ShardFilter(i, n int) string {
	return fmt.Sprintf("(%s %% %d) = %d", shardKey, n, i)
}

// ShardSnapshotWhere is the predicate of shard i of n's initial snapshot: the shard's row filter, and
// where (the user's --snapshot-where) as well when it is set.
func ShardSnapshotWhere(where string, i, n int) string {
	if strings.TrimSpace(where) == "" {
		return ShardFilter(i, n)
	}
	return "(" + where + ") AND " + ShardFilter(i, n)
}

// ShardPublication is the publication of shard i of n: base_shard_<i>_of_<n>.
func ShardPublication(base string, i, n int) string {
	return fmt.Sprintf("%s_shard_%d_of_%d", base, i, n)
}

// ShardSlot is the slot of shard i of n: base_shard_<i>_of_<n>.
func ShardSlot(base string, i, n int) string { return fmt.Sprintf("%s_shard_%d_of_%d", base, i, n) }

var shardName = regexp.MustCompile(`_shard_(\d+)_of_(\d+)$`)

// ShardOf is the shard a publication name says it is for; ok is false for a name of no shard.
func ShardOf(publication string) (i, n int, ok bool) {
	m := shardName.FindStringSubmatch(publication)
	if m == nil {
		return 0, 0, false
	}
	i, _ = strconv.Atoi(m[1])
	n, _ = strconv.Atoi(m[2])
	return i, n, true
}

// ParseShard parses "i/N" (0 <= i < N, 2 <= N <= MaxShards), as `run --shard` takes it.
func ParseShard(s string) (i, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	i, err1 := strconv.Atoi(strings.TrimSpace(a))
	n, err2 := strconv.Atoi(strings.TrimSpace(b))
	if ok && err1 == nil && err2 == nil && n >= 2 && n <= MaxShards && (i < 0 || i >= n) {
		return 0, 0, fmt.Errorf("--shard %q is out of range: the %d shards of %d are numbered from 0 to %d (--shard 0/%d ... "+
			"--shard %d/%d)", s, n, n, n-1, n, n-1, n)
	}
	if !ok || err1 != nil || err2 != nil || n < 2 || n > MaxShards || i < 0 || i >= n {
		return 0, 0, fmt.Errorf("--shard %q is not i/N: write the shard's number i from 0 to N-1 and the number of "+
			"shards N from 2 to %d, e.g. --shard 0/4 ... --shard 3/4", s, MaxShards)
	}
	return i, n, nil
}

// ErrNoRowFilters: the server is older than PostgreSQL 15, which brought publication row filters.
var ErrNoRowFilters = errors.New("publication row filters need PostgreSQL 15 or later")

// querier is what the shard checks read with: a connection or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ApplyShards creates the publications of n shards of cfg.Table (cfg.Publication is the base name), each
// publishing the inserts of its shard only, in one transaction under Apply's advisory lock. An existing one
// is kept if its row filter is its shard's, and refused otherwise. Run Apply first.
func ApplyShards(ctx context.Context, conn *pgx.Conn, cfg Config, n int) error {
	cfg = cfg.Defaults()
	if n < 2 || n > MaxShards {
		return problemf("--shards %d: choose from 2 to %d shards (one router needs no shards)", n, MaxShards)
	}
	if err := needRowFilters(ctx, conn, "--shards", "--shards"); err != nil {
		return err
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate shards: %w", err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('cdc_router_migrate'))"); err != nil {
		return fmt.Errorf("migrate shards: %w", err)
	}
	if err := createShards(ctx, tx, cfg, n); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func createShards(ctx context.Context, tx pgx.Tx, cfg Config, n int) error {
	// A partitioned outbox is published through its root, as by Apply; the root's row filter applies.
	options := "publish = 'insert'"
	var partitioned bool
	if err := tx.QueryRow(ctx, `SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass($1)), false)`,
		TableIdent(cfg.Table).Sanitize()).Scan(&partitioned); err != nil {
		return fmt.Errorf("read outbox table kind: %w", err)
	}
	if partitioned {
		options += ", publish_via_partition_root = true"
	}
	for i := range n {
		sc := cfg
		sc.Publication = ShardPublication(cfg.Publication, i, n)
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)`, sc.Publication).
			Scan(&exists); err != nil {
			return fmt.Errorf("read publications: %w", err)
		}
		if exists {
			if err := replaceEarlierShard(ctx, tx, sc, i, n); err != nil {
				return err
			}
			if err := checkShard(ctx, tx, sc); err != nil {
				return err
			}
			continue
		}
		stmt := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WHERE (%s) WITH (%s)",
			pgx.Identifier{sc.Publication}.Sanitize(), TableIdent(cfg.Table).Sanitize(), ShardFilter(i, n), options)
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("create publication %s: %w", sc.Publication, err)
		}
	}
	return nil
}

// replaceEarlierShard gives the existing publication of shard i of n the current ShardFilter in place
// (ALTER PUBLICATION … SET TABLE … WHERE) when its filter is an earlier form of it (earlierShardFilter):
// every row with a non-NULL key stays in its shard. The walsender applies the new filter from the ALTER's
// position in the WAL on; changes before it are decoded with the filter they were written under.
func replaceEarlierShard(ctx context.Context, tx pgx.Tx, cfg Config, i, n int) error {
	ident := TableIdent(cfg.Table)
	var filter *string
	err := tx.QueryRow(ctx, `SELECT rowfilter FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2
		AND tablename = $3`, cfg.Publication, ident[0], ident[1]).Scan(&filter)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && filter == nil {
		return nil // checkShard refuses it
	}
	if err != nil {
		return fmt.Errorf("read publication row filter: %w", err)
	}
	earlier, err := earlierShardFilter(ctx, tx, *filter, cfg.Table, i, n)
	if err != nil || !earlier {
		return err
	}
	stmt := fmt.Sprintf("ALTER PUBLICATION %s SET TABLE %s WHERE (%s)", pgx.Identifier{cfg.Publication}.Sanitize(),
		ident.Sanitize(), ShardFilter(i, n))
	old, err := publicationRel(ctx, tx, cfg.Publication, ident)
	if err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, stmt); err != nil {
		return fmt.Errorf("replace the row filter of publication %s: %w", cfg.Publication, err)
	}
	cur, err := publicationRel(ctx, tx, cfg.Publication, ident)
	if err != nil {
		return err
	}
	return keepMembership(ctx, tx, cfg.Schema, old, cur)
}

// publicationRel is the oid of the pg_publication_rel row that puts table in publication.
func publicationRel(ctx context.Context, tx pgx.Tx, publication string, table pgx.Identifier) (uint32, error) {
	var oid uint32
	err := tx.QueryRow(ctx, `SELECT r.oid FROM pg_publication_rel r JOIN pg_publication p ON p.oid = r.prpubid
		WHERE p.pubname = $1 AND r.prrelid = $2::regclass`, publication, table.Sanitize()).Scan(&oid)
	if err != nil {
		return 0, fmt.Errorf("read the membership of %s in publication %s: %w", table.Sanitize(), publication, err)
	}
	return oid, nil
}

// keepMembership carries the routers' recorded membership identity of a table over a row filter replaced
// in place (SET TABLE with another WHERE makes a new pg_publication_rel row, old becomes cur): the table
// never left the publication (the replacement is one transaction), so the routers must not take the new row
// for a publication gap (replication's publication checks compare these identities).
func keepMembership(ctx context.Context, tx pgx.Tx, schema string, old, cur uint32) error {
	if old == cur {
		return nil
	}
	checks := pgx.Identifier{schema, "publication_checks"}.Sanitize()
	var exists bool
	if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL AND EXISTS (SELECT 1 FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attname = 'identities' AND NOT attisdropped)`, checks).Scan(&exists); err != nil || !exists {
		return err
	}
	_, err := tx.Exec(ctx, `UPDATE `+checks+` c SET identities = (SELECT jsonb_object_agg(key,
			regexp_replace(value, ' rel ' || $1 || '( |$)', ' rel ' || $2 || '\1'))
		FROM jsonb_each_text(c.identities)) WHERE c.identities::text ~ (' rel ' || $1 || '( |")')`, fmt.Sprint(old), fmt.Sprint(cur))
	if err != nil {
		return fmt.Errorf("carry the routers' publication membership over the new row filter: %w", err)
	}
	return nil
}

// needRowFilters refuses a server before PostgreSQL 15.
func needRowFilters(ctx context.Context, conn querier, what, flag string) error {
	var version int
	var text string
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, current_setting('server_version')`).
		Scan(&version, &text); err != nil {
		return fmt.Errorf("read server version: %w", err)
	}
	if version < 150000 {
		return &Problem{Msg: fmt.Sprintf("%s needs publication row filters, which PostgreSQL %s does not have (they came "+
			"with PostgreSQL 15): upgrade PostgreSQL, or run one router without %s", what, text, flag)}
	}
	return nil
}

// checkShard is the part of Check about shards. A publication named as shard i of n (run --shard i/n)
// must carry exactly that shard's row filter, on PostgreSQL 15 or later; any other publication must not
// carry a shard's filter, since an unsharded router would then publish one shard's events only. The
// filter is compared by its results on sample keys, not by its text, which PostgreSQL rewrites.
func checkShard(ctx context.Context, conn querier, cfg Config) error {
	i, n, sharded := ShardOf(cfg.Publication)
	if sharded {
		if err := needRowFilters(ctx, conn, fmt.Sprintf("--shard %d/%d", i, n), "--shard"); err != nil {
			return err
		}
	} else {
		var version int
		if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
			return fmt.Errorf("read server version: %w", err)
		}
		if version < 150000 {
			return nil
		}
	}
	ident := TableIdent(cfg.Table)
	var filter *string
	err := conn.QueryRow(ctx, `SELECT rowfilter FROM pg_publication_tables WHERE pubname = $1 AND schemaname = $2
		AND tablename = $3`, cfg.Publication, ident[0], ident[1]).Scan(&filter)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // checkPublication reports a table missing from the publication
	}
	if err != nil {
		return fmt.Errorf("read publication row filter: %w", err)
	}
	redo := fmt.Sprintf("run DROP PUBLICATION %s, then `cdc-router migrate --shards %d` to create it again",
		pgx.Identifier{cfg.Publication}.Sanitize(), n)
	switch {
	case !sharded && filter != nil && strings.Contains(*filter, "hashtextextended"):
		return problemf("publication %q has a shard's row filter (%s), so this router, run without --shard, would "+
			"publish only that shard's events: run it with --shard i/N (which picks the publication <publication>_shard_i_of_N "+
			"and the slot <slot>_shard_i_of_N), or point --publication at the unfiltered publication", cfg.Publication, *filter)
	case !sharded:
		return nil
	case filter == nil:
		return problemf("publication %q of shard %d/%d has no row filter, so this router would publish the events "+
			"of every shard: %s", cfg.Publication, i, n, redo)
	}
	typ, id, err := keyCollations(ctx, conn, cfg.Table)
	if err != nil {
		return err
	}
	if wrong, err := disagreements(ctx, conn, *filter, i, n, shardSample(typ, id, true)); err == nil && wrong == 0 {
		return nil
	}
	earlier, err := earlierShardFilter(ctx, conn, *filter, cfg.Table, i, n)
	if err != nil {
		return err
	}
	if earlier {
		return problemf("publication %q has the row filter of shard %d/%d as an earlier cdc-router wrote it (%s), which "+
			"puts a row with a NULL key in no shard and cannot hash key columns of different collations (every insert "+
			"then fails in the walsender): run `cdc-router migrate --shards %d`, which replaces it in place and leaves "+
			"every other row in its shard", cfg.Publication, i, n, *filter, n)
	}
	return problemf("publication %q has the row filter %s, which is not the one of shard %d/%d, so this router "+
		"would miss events of its shard or publish another shard's: %s", cfg.Publication, *filter, i, n, redo)
}
