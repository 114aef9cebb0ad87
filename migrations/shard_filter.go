package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A shard publication's row filter is judged by what PostgreSQL makes of it, not by its text (which
// PostgreSQL rewrites): it is evaluated beside the current ShardFilter on sample keys that carry the
// collations of the table's own key columns, so that a filter the walsender could not evaluate on the
// table's rows (42P22, could not determine which collation to use for string hashing) cannot pass.

// keyCollations are the COLLATE clauses of the table's aggregate_type and aggregate_id columns; the
// database default for a column that is not there (checkTable reports it).
func keyCollations(ctx context.Context, q querier, table string) (typ, id string, err error) {
	typ, id = `pg_catalog."default"`, `pg_catalog."default"`
	err = q.QueryRow(ctx, `SELECT
		coalesce(max(quote_ident(n.nspname) || '.' || quote_ident(c.collname)) FILTER (WHERE a.attname = 'aggregate_type'), $2),
		coalesce(max(quote_ident(n.nspname) || '.' || quote_ident(c.collname)) FILTER (WHERE a.attname = 'aggregate_id'), $2)
		FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation JOIN pg_namespace n ON n.oid = c.collnamespace
		WHERE a.attrelid = to_regclass($1) AND a.attname IN ('aggregate_type', 'aggregate_id') AND NOT a.attisdropped`,
		TableIdent(table).Sanitize(), typ).Scan(&typ, &id)
	if err != nil {
		return "", "", fmt.Errorf("read the collations of the outbox's key columns: %w", err)
	}
	return typ, id, nil
}

// shardSample is a sample of 2,000 keys of 7 types whose columns have the collations typ and id (COLLATE
// clauses); with nulls every 50th aggregate_id and every 70th aggregate_type is NULL.
func shardSample(typ, id string, nulls bool) string {
	nullID, nullType := "false", "false"
	if nulls {
		nullID, nullType = "g % 50 = 0", "g % 70 = 1"
	}
	return fmt.Sprintf(`SELECT (CASE WHEN %s THEN NULL ELSE 'type_' || (g %% 7) END) COLLATE %s AS aggregate_type,
		(CASE WHEN %s THEN NULL ELSE 'id-' || g END) COLLATE %s AS aggregate_id FROM generate_series(1, 2000) AS g`,
		nullType, typ, nullID, id)
}

// disagreements counts the sample keys on which filter and shard i of n's filter differ (NULL counts as a
// value of its own). On a transaction it runs in a savepoint, so that a filter PostgreSQL cannot evaluate
// leaves the transaction usable.
func disagreements(ctx context.Context, q querier, filter string, i, n int, sample string) (int64, error) {
	sql := fmt.Sprintf(`SELECT count(*) FROM (%s) AS sample WHERE (%s) IS DISTINCT FROM (%s)`, sample, filter, ShardFilter(i, n))
	if tx, ok := q.(pgx.Tx); ok {
		sp, err := tx.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer sp.Rollback(ctx)
		q = sp
		var wrong int64
		if err := q.QueryRow(ctx, sql).Scan(&wrong); err != nil {
			return 0, err
		}
		return wrong, sp.Commit(ctx)
	}
	var wrong int64
	err := q.QueryRow(ctx, sql).Scan(&wrong)
	return wrong, err
}

// earlierShardFilter reports whether filter is shard i of n's filter as cdc-router wrote it before the key
// was hashed under COLLATE "C" and a NULL key given shard 0, and may be replaced by ShardFilter(i, n)
// without moving any row to another shard: it is not the current filter, and it puts every non-NULL sample
// key in the shard the current filter puts it in, under the database's default collation and under the
// columns' own. Under the columns' own it may fail with 42P22 (two different collations): then the
// walsender could not evaluate it either and no row ever passed it. Under a nondeterministic collation it
// hashes differently, and is not taken for an earlier form.
func earlierShardFilter(ctx context.Context, q querier, filter, table string, i, n int) (bool, error) {
	if !strings.Contains(filter, "hashtextextended") {
		return false, nil
	}
	typ, id, err := keyCollations(ctx, q, table)
	if err != nil {
		return false, err
	}
	if wrong, err := disagreements(ctx, q, filter, i, n, shardSample(typ, id, true)); err == nil && wrong == 0 {
		return false, nil // the current filter
	}
	def := `pg_catalog."default"`
	if wrong, err := disagreements(ctx, q, filter, i, n, shardSample(def, def, false)); err != nil || wrong > 0 {
		return false, nil
	}
	wrong, err := disagreements(ctx, q, filter, i, n, shardSample(typ, id, false))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P22" {
		return true, nil
	}
	return err == nil && wrong == 0, nil
}
