package snapshot

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/offsets"
)

// The snapshot of several outbox tables copies them merged: each page is the next rows of all of them in
// one (aggregate_type, aggregate_id, aggregate_version) order, so an aggregate whose versions span tables
// arrives in version order, as the stream delivers it. The order is PostgreSQL's: each table's page is
// read in its own key order (by its unique index) and the pages are merged by the same key, which is one
// order only when the tables' key columns have the same types and collations (Mergeable). Each table
// keeps its own job and progress (the last key of it that is confirmed), so a crash resumes every table
// after its own key: a row is then published again at most (a duplicate of an older version), never first
// after a later version of its aggregate from another table.

// Mergeable says why the tables of cfgs cannot be copied merged ("" when they can): a table read through
// a mapping (keyed by its primary key, not by version), a partitioned table whose key has further columns,
// a key column that allows NULL, or key columns whose types or collations differ between the tables (their
// orders would differ).
func Mergeable(ctx context.Context, cfgs []Config, q Querier) (string, error) {
	var first, firstTable string
	for _, cfg := range cfgs {
		cfg = cfg.withDefaults()
		if cfg.mapping() != nil {
			return fmt.Sprintf("%s is read through --config, keyed by its primary key", cfg.Table), nil
		}
		ks, err := readKeyset(ctx, cfg, q)
		if err != nil {
			return "", err
		}
		if len(ks.extra) > 0 {
			return fmt.Sprintf("%s is partitioned by columns outside the aggregate key", cfg.Table), nil
		}
		if nullable, err := nullableKey(ctx, cfg, q, ks); err != nil || nullable {
			return fmt.Sprintf("a key column of %s allows NULL", cfg.Table), err
		}
		var kind string
		err = q.QueryRow(ctx, `SELECT string_agg(attname || ' ' || format_type(atttypid, atttypmod) || ' ' || attcollation,
			', ' ORDER BY attname) FROM pg_attribute WHERE attrelid = to_regclass($1)
			AND attname IN ('aggregate_type', 'aggregate_id', 'aggregate_version')`,
			migrations.TableIdent(cfg.Table).Sanitize()).Scan(&kind)
		if err != nil {
			return "", fmt.Errorf("read key columns of %s: %w", cfg.Table, err)
		}
		if first == "" {
			first, firstTable = kind, cfg.Table
		} else if kind != first {
			return fmt.Sprintf("the key columns of %s and %s differ in type or collation", firstTable, cfg.Table), nil
		}
	}
	return "", nil
}

// CopyMerged copies the jobs of the tables of cfgs (list[i] is the job of cfgs[i], reps[i] its reporter)
// merged in key order, as Copy copies one. A job's RowsTotal must count the rows it has left in q's
// snapshot (Count): a table is done when they are copied, and its job is marked done then, while the
// others go on. The tables must be Mergeable.
func CopyMerged(ctx context.Context, cfgs []Config, q Querier, jobs *Jobs, list []Job, pub Publisher, reps []*Reporter) error {
	m := &merge{}
	for i, cfg := range cfgs {
		c := newCopier(cfg.withDefaults(), q, jobs, list[i], pub, reps[i])
		m.add(c, list[i].LastKey, list[i].RowsDone, list[i].RowsTotal-list[i].RowsDone)
	}
	err := m.run(ctx)
	if err != nil && ctx.Err() != nil && len(m.cs) > 0 {
		by, end := m.cs[0].cfg.stopBounds()
		for _, c := range m.cs {
			c.settle(by, end)
		}
	}
	return err
}

// merge is the state of a merged copy: the tables not done yet, each after its last key.
type merge struct {
	cs    []*copier
	after []*Key
	read  []int64 // rows copied of each table (stored progress before this process, then this one's)
	left  []int64 // rows each table has left
}

func (m *merge) add(c *copier, after *Key, read, left int64) {
	m.cs, m.after, m.read, m.left = append(m.cs, c), append(m.after, after), append(m.read, read), append(m.left, left)
}

// run copies until every table is done, going on with a new publisher after a per-message refusal, as
// the copy of one table does (refusals.go).
func (m *merge) run(ctx context.Context) error {
	for size := m.cs[0].cfg.PageSize; len(m.cs) > 0; {
		n, err := 0, m.finishDone(ctx)
		if err == nil && len(m.cs) == 0 {
			return nil
		}
		for _, c := range m.cs {
			if err == nil {
				err = c.keepUp(ctx)
			}
		}
		if err == nil {
			n, err = copyMergedPage(ctx, m.cs, m.after, m.read, size)
		}
		if err != nil {
			again, rerr := m.refused(ctx, err)
			if rerr != nil {
				return rerr
			}
			if !again {
				return err
			}
			continue
		}
		for i, c := range m.cs {
			m.left[i] = c.job.RowsTotal - m.read[i]
		}
		if n < size { // every table is done
			for i := range m.left {
				m.left[i] = 0
			}
		}
	}
	return nil
}

// refused is the copy's safety net for a merged copy: after a per-message refusal every table is wound
// back to its last confirmed row and publishes the rows up to the furthest one it had read one at a time,
// through one new publisher. It reports whether the copy goes on.
func (m *merge) refused(ctx context.Context, err error) (bool, error) {
	if ctx.Err() != nil || m.cs[0].cfg.Renew == nil || !cdc.PerMessage(err) {
		return false, nil
	}
	var backoff time.Duration
	for i, c := range m.cs {
		if rerr := c.rewind(ctx, err); rerr != nil {
			return false, rerr
		}
		backoff = max(backoff, c.net.backoff)
		m.after[i], m.read[i] = c.job.LastKey, c.job.RowsDone
		m.left[i] = c.job.RowsTotal - c.job.RowsDone
	}
	pub, rerr := renewAfter(ctx, m.cs[0].cfg, backoff, err)
	if rerr != nil {
		return false, rerr
	}
	for _, c := range m.cs {
		c.pub = pub
	}
	return true, nil
}

// finishDone waits for the confirms of each table that has no rows left and marks its job done.
func (m *merge) finishDone(ctx context.Context) error {
	for i := 0; i < len(m.cs); {
		if m.left[i] > 0 {
			i++
			continue
		}
		c := m.cs[i]
		if err := c.drain(ctx); err != nil {
			return err
		}
		if err := c.jobs.Finish(ctx, c.job.Name, c.job.RowsDone); err != nil {
			return err
		}
		c.rep.Finish(c.job.RowsDone)
		m.cs, m.after = append(m.cs[:i], m.cs[i+1:]...), append(m.after[:i], m.after[i+1:]...)
		m.read, m.left = append(m.read[:i], m.read[i+1:]...), append(m.left[:i], m.left[i+1:]...)
	}
	return nil
}

// copyMergedPage reads the next size rows of all the tables in key order and publishes or quarantines
// them, each as a row of its own table's page; it moves after and read on and returns the number of rows.
func copyMergedPage(ctx context.Context, cs []*copier, after []*Key, read []int64, size int) (int, error) {
	sql, args := mergedPageQuery(cs, after, size)
	rows, err := cs[0].q.Query(ctx, sql, args...)
	if err != nil {
		return 0, explainQuery(err, cs[0].cfg)
	}
	defer rows.Close()
	pages := make([]offsets.Txn, len(cs))
	for i, c := range cs {
		pages[i] = c.pages.Begin()
	}
	counts, lasts := make([]int, len(cs)), make([]Key, len(cs))
	n := 0
	for rows.Next() {
		var t int
		raw := make([]*string, len(columnNames))
		dest := []any{&t}
		for i := range raw {
			dest = append(dest, &raw[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return 0, fmt.Errorf("read row: %w", err)
		}
		c := cs[t]
		c.net.at = read[t] + int64(counts[t])
		careful := c.net.careful()
		if lasts[t], err = c.emit(ctx, pages[t], raw, false); err != nil {
			return 0, err
		}
		counts[t]++
		n++
		if careful { // confirmed or quarantined, as every row of its table before it
			k := lasts[t]
			c.net.done = &mark{last: &k, done: read[t] + int64(counts[t])}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, explainQuery(err, cs[0].cfg)
	}
	for i, c := range cs {
		if err := c.endPage(ctx, pages[i], counts[i], lasts[i], read[i], true); err != nil {
			return 0, err
		}
		if counts[i] > 0 {
			last := lasts[i]
			after[i], read[i] = &last, read[i]+int64(counts[i])
		}
	}
	return n, nil
}

// mergedPageQuery is the next page of every table after its key, each read by its own key order (its
// unique index) and limited to size, merged by the typed key (a text cast would sort "10" before "9") and
// limited to size again. Each row is the table's index in cs, then columnNames.
func mergedPageQuery(cs []*copier, after []*Key, size int) (string, []any) {
	var parts []string
	var args []any
	for i, c := range cs {
		q := fmt.Sprintf("SELECT %d AS t, ", i) + columns + `, o.aggregate_type AS k1, o.aggregate_id AS k2,
			o.aggregate_version AS k3` + c.cfg.from()
		if k := after[i]; k != nil {
			q += fmt.Sprintf(" AND (o.aggregate_type, o.aggregate_id, o.aggregate_version) > ($%d, $%d, $%d)",
				len(args)+1, len(args)+2, len(args)+3)
			args = append(args, k.AggregateType, k.AggregateID, k.Version)
		}
		parts = append(parts, "("+q+fmt.Sprintf(" ORDER BY o.aggregate_type, o.aggregate_id, o.aggregate_version LIMIT %d)", size))
	}
	return "SELECT t, " + strings.Join(columnNames, ", ") + " FROM (" + strings.Join(parts, " UNION ALL ") +
		fmt.Sprintf(") u ORDER BY k1, k2, k3, t LIMIT %d", size), args
}
