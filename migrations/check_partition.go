package migrations

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
)

// partitionKey is what the setup check needs to know of a partitioned outbox's partition key.
type partitionKey struct {
	partitioned bool     // the outbox is a partitioned table (relkind p)
	columns     []string // the partition key's columns, in key order
	expression  bool     // the partition key holds an expression, so no unique key can include it
}

// extra is the partition key's columns that are not already in keyColumns: what a unique key of the
// partitioned table adds to the aggregate key, and what snapshots page by after it.
func (p partitionKey) extra() []string {
	var out []string
	for _, c := range p.columns {
		if !slices.Contains(keyColumns, c) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

// readPartitionKey reads the partition key of table; partitioned is false for an ordinary table.
func readPartitionKey(ctx context.Context, conn *pgx.Conn, table uint32) (partitionKey, error) {
	var p partitionKey
	var names []*string
	err := conn.QueryRow(ctx, `SELECT ARRAY(SELECT a.attname::text FROM unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, ord)
		    LEFT JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = k.attnum ORDER BY k.ord)
		FROM pg_partitioned_table p WHERE p.partrelid = $1`, table).Scan(&names)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, nil
	}
	if err != nil {
		return p, fmt.Errorf("read outbox partition key: %w", err)
	}
	p.partitioned = true
	for _, n := range names {
		if n == nil { // attnum 0: an expression
			p.expression = true
			continue
		}
		p.columns = append(p.columns, *n)
	}
	return p, nil
}

// checkPartitionedKey accepts a partitioned outbox with a valid unique key (no predicate, no expression)
// whose columns are all among key: the aggregate key and the partition key. PostgreSQL makes every unique key
// of a partitioned table include the partition key, so (aggregate_type, aggregate_id, aggregate_version)
// alone cannot be one; key is then unique and snapshots page by it.
func checkPartitionedKey(ctx context.Context, conn *pgx.Conn, cfg Config, table uint32, key []string) error {
	var keyed bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_index i
		WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indpred IS NULL AND i.indexprs IS NULL
		  AND ARRAY(SELECT a.attname::text FROM unnest(i.indkey::int2[]) AS k(attnum)
		            JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum) <@ $2::text[])`,
		table, key).Scan(&keyed)
	if err != nil {
		return fmt.Errorf("read outbox keys: %w", err)
	}
	if keyed {
		return nil
	}
	cols := strings.Join(key, ", ")
	return problemf("the partitioned outbox table %s has no unique key on (%s), which snapshots page by (a unique key "+
		"of a partitioned table must include its partition key): ALTER TABLE %s ADD UNIQUE (%s)",
		cfg.Table, cols, TableIdent(cfg.Table).Sanitize(), cols)
}
