package snapshot

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/migrations"
)

// keyset is the order pages are read in: (aggregate_type, aggregate_id, aggregate_version) and, for a
// partitioned outbox, the partition key's columns that are not among those three. A unique key of a
// partitioned table must include the partition key, so the aggregate key alone may repeat across
// partitions; with the partition columns after it the keyset is unique (the setup check wants a unique key
// within it) and each aggregate's rows still come in version order.
type keyset struct {
	extra []keyColumn // in partition key order; none for an ordinary table
}

// keyColumn is a partition key column: its name and its type as format_type prints it (the cast a stored
// value, kept as text, gets back).
type keyColumn struct{ name, typ string }

// readKeyset reads the outbox's partition key through q (inside the snapshot's transaction, if any).
func readKeyset(ctx context.Context, cfg Config, q Querier) (keyset, error) {
	var names, types []string
	err := q.QueryRow(ctx, `SELECT coalesce(array_agg(a.attname::text ORDER BY k.ord), '{}'),
		    coalesce(array_agg(format_type(a.atttypid, a.atttypmod) ORDER BY k.ord), '{}')
		FROM pg_partitioned_table p, unnest(p.partattrs::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attnum = k.attnum
		WHERE p.partrelid = to_regclass($1) AND a.attrelid = p.partrelid
		  AND a.attname NOT IN ('aggregate_type', 'aggregate_id', 'aggregate_version')`,
		migrations.TableIdent(cfg.Table).Sanitize()).Scan(&names, &types)
	if err != nil {
		return keyset{}, fmt.Errorf("read the partition key of %s: %w", cfg.Table, err)
	}
	var ks keyset
	for i, n := range names {
		if !slices.ContainsFunc(ks.extra, func(c keyColumn) bool { return c.name == n }) {
			ks.extra = append(ks.extra, keyColumn{name: n, typ: types[i]})
		}
	}
	return ks, nil
}

// refs is the qualified references to the keyset's columns, in order.
func (ks keyset) refs() []string {
	out := []string{"o.aggregate_type", "o.aggregate_id", "o.aggregate_version"}
	for _, c := range ks.extra {
		out = append(out, "o."+pgx.Identifier{c.name}.Sanitize())
	}
	return out
}

// selectExtra is the text of the extra key columns, appended to the page query's select list.
func (ks keyset) selectExtra() string {
	var b strings.Builder
	for _, r := range ks.refs()[3:] {
		b.WriteString(", " + r + "::text")
	}
	return b.String()
}

func (ks keyset) orderBy() string { return " ORDER BY " + strings.Join(ks.refs(), ", ") }

// after is the predicate for the rows after k, and its arguments. A key that holds a value for each extra
// column is compared whole; a key stored without them (before the outbox was partitioned, by an older
// version) resumes at its aggregate key inclusive, so that a row sharing it is published again rather than
// skipped.
func (ks keyset) after(k *Key) (string, []any) {
	args := []any{k.AggregateType, k.AggregateID, k.Version}
	if len(ks.extra) == 0 || len(k.Partition) != len(ks.extra) {
		op := ">"
		if len(ks.extra) > 0 {
			op = ">="
		}
		return "(o.aggregate_type, o.aggregate_id, o.aggregate_version) " + op + " ($1, $2, $3)", args
	}
	params := []string{"$1", "$2", "$3"}
	for i, c := range ks.extra {
		args = append(args, k.Partition[i])
		params = append(params, fmt.Sprintf("$%d::text::%s", len(args), c.typ))
	}
	return "(" + strings.Join(ks.refs(), ", ") + ") > (" + strings.Join(params, ", ") + ")", args
}

// complete and hasNull say whether none, or some, of the keyset's columns of a row are NULL.
func (ks keyset) complete() string {
	var parts []string
	for _, r := range ks.refs() {
		parts = append(parts, r+" IS NOT NULL")
	}
	return strings.Join(parts, " AND ")
}

func (ks keyset) hasNull() string {
	var parts []string
	for _, r := range ks.refs() {
		parts = append(parts, r+" IS NULL")
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}
