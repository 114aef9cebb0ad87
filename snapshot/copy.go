package snapshot

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/offsets"
)

// Publisher takes events to the broker; route.Router satisfies it.
type Publisher interface {
	// Publish blocks while the window is full; done is called once, only after a positive confirm.
	Publish(ctx context.Context, ev cdc.Event, done func()) error
	Failed() <-chan struct{}
	Err() error
}

// Querier runs the page queries: a transaction holding the slot's snapshot, or a connection. It must not
// be the connection of the Jobs store, which is written while a page is being read.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config says what to copy.
type Config struct {
	Table    string        // outbox table; default public.outbox
	Schema   string        // the router's schema (quarantine, progress); default cdc_router
	Slot     string        // slot name recorded with quarantined rows
	Where    string        // SQL predicate restricting the rows; empty means all
	PageSize int           // rows per keyset page; default 2000
	Rate     float64       // rows per second at most; 0 means unlimited
	Decode   decode.Config // row rules, shared with the stream
}

func (c Config) withDefaults() Config {
	if c.Table == "" {
		c.Table = "public.outbox"
	}
	if c.Schema == "" {
		c.Schema = "cdc_router"
	}
	if c.PageSize <= 0 {
		c.PageSize = 2000
	}
	if c.Decode.Table == "" {
		c.Decode.Table = c.Table
	}
	return c
}

// columns are read as text, in the form the decoder's row mapping expects (the reader's session runs with
// TimeZone=UTC and DateStyle=ISO). Every reference is qualified with the table alias o: an unqualified
// ORDER BY aggregate_version would sort by the text output column ("10" before "9") and the keyset would
// then skip rows.
const columns = `o.id::text, o.aggregate_type, o.aggregate_id, o.aggregate_version::text, o.event_type,
	o.schema_version::text, o.payload::text, o.headers::text, o.occurred_at::text`

const keyAfter = " AND (o.aggregate_type, o.aggregate_id, o.aggregate_version) > ($1, $2, $3)"

var columnNames = []string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "event_type",
	"schema_version", "payload", "headers", "occurred_at"}

func (c Config) predicate() string {
	if c.Where == "" {
		return "true"
	}
	return "(" + c.Where + ")"
}

func (c Config) pageQuery(after *Key) (string, []any) {
	table := migrations.TableIdent(c.Table).Sanitize()
	q := "SELECT " + columns + " FROM " + table + " AS o WHERE " + c.predicate()
	var args []any
	if after != nil {
		q += keyAfter
		args = []any{after.AggregateType, after.AggregateID, after.Version}
	}
	q += fmt.Sprintf(" ORDER BY o.aggregate_type, o.aggregate_id, o.aggregate_version LIMIT %d", c.PageSize)
	return q, args
}

// Count returns how many rows the job has left to copy.
func Count(ctx context.Context, cfg Config, q Querier, after *Key) (int64, error) {
	cfg = cfg.withDefaults()
	sql := "SELECT count(*) FROM " + migrations.TableIdent(cfg.Table).Sanitize() + " AS o WHERE " + cfg.predicate()
	var args []any
	if after != nil {
		sql += keyAfter
		args = []any{after.AggregateType, after.AggregateID, after.Version}
	}
	var n int64
	if err := q.QueryRow(ctx, sql, args...).Scan(&n); err != nil {
		return 0, explainQuery(err, cfg)
	}
	return n, nil
}

// explainQuery turns a bad predicate into one sentence.
func explainQuery(err error, cfg Config) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && cfg.Where != "" && (pgErr.Code[:2] == "42" || pgErr.Code[:2] == "22") {
		return fmt.Errorf("the predicate %q does not work on %s (%s): fix --snapshot-where / --where", cfg.Where,
			cfg.Table, pgErr.Message)
	}
	return fmt.Errorf("read %s: %w", cfg.Table, err)
}

// mark is what the progress store needs once every row up to a page end is confirmed.
type mark struct {
	last Key
	done int64
}

// Copy publishes every row of the job after its last key, in key order, storing progress whenever every
// row up to a page end is confirmed (at most once a second, and at the end), then marks the job done.
// It returns the finished job.
func Copy(ctx context.Context, cfg Config, q Querier, jobs *Jobs, job Job, pub Publisher, rep *Reporter) (Job, error) {
	cfg = cfg.withDefaults()
	c := &copier{cfg: cfg, q: q, jobs: jobs, job: job, pub: pub, rep: rep, pages: offsets.NewTracker(1),
		marks: map[cdc.LSN]mark{}, began: time.Now()}
	if err := c.run(ctx); err != nil {
		return c.job, err
	}
	if err := jobs.Finish(ctx, job.Name, c.job.RowsDone); err != nil {
		return c.job, err
	}
	c.job.State = "done"
	rep.Finish(c.job.RowsDone)
	return c.job, nil
}

type copier struct {
	cfg   Config
	q     Querier
	jobs  *Jobs
	job   Job
	pub   Publisher
	rep   *Reporter
	pages *offsets.Tracker // a page is a "transaction" whose end is its number
	marks map[cdc.LSN]mark
	page  cdc.LSN
	prev  *mark // mark of the last page that had rows
	read  int64 // rows read by this process, for the rate limit
	began time.Time
	saved time.Time
}

func (c *copier) run(ctx context.Context) error {
	err := c.copyAll(ctx)
	if err != nil && ctx.Err() != nil {
		c.settle(5 * time.Second)
	}
	return err
}

// settle is the stop path: it lets the confirms of the pages already read arrive (bounded) and stores how
// far they reach, so that the next start resumes as late as possible.
func (c *copier) settle(bound time.Duration) {
	deadline := time.Now().Add(bound)
	for c.pages.Watermark() < c.page+1 && time.Now().Before(deadline) {
		select {
		case <-c.pub.Failed():
			deadline = time.Now()
		case <-c.pages.Advanced():
		case <-time.After(100 * time.Millisecond):
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c.progress(ctx, true)
}

func (c *copier) copyAll(ctx context.Context) error {
	after, read := c.job.LastKey, c.job.RowsDone
	for {
		n, last, err := c.copyPage(ctx, after, read)
		if err != nil {
			return err
		}
		read += int64(n)
		if n < c.cfg.PageSize {
			break
		}
		after = &last
	}
	for c.pages.InFlight() > 0 {
		select {
		case <-c.pub.Failed():
			return fmt.Errorf("publish: %w", c.pub.Err())
		case <-ctx.Done():
			return ctx.Err()
		case <-c.pages.Advanced():
			if err := c.progress(ctx, false); err != nil {
				return err
			}
		case <-time.After(time.Second):
		}
	}
	return c.progress(ctx, true)
}

// copyPage reads one page and publishes its rows; it returns the number of rows and the last key.
func (c *copier) copyPage(ctx context.Context, after *Key, doneBefore int64) (int, Key, error) {
	sql, args := c.cfg.pageQuery(after)
	rows, err := c.q.Query(ctx, sql, args...)
	if err != nil {
		return 0, Key{}, explainQuery(err, c.cfg)
	}
	defer rows.Close()
	page := c.pages.Begin()
	var last Key
	n := 0
	for rows.Next() {
		raw := make([]*string, len(columnNames))
		dest := make([]any, len(raw))
		for i := range raw {
			dest[i] = &raw[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return 0, Key{}, fmt.Errorf("read row: %w", err)
		}
		if last, err = c.emit(ctx, page, raw); err != nil {
			return 0, Key{}, err
		}
		n++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, Key{}, explainQuery(err, c.cfg)
	}
	c.page++
	c.pages.Commit(page, c.page+1)
	if n > 0 {
		c.prev = &mark{last: last, done: doneBefore + int64(n)}
	}
	if c.prev != nil {
		c.marks[c.page+1] = *c.prev
	}
	return n, last, c.progress(ctx, false)
}

// emit publishes one row (or quarantines it) and applies the rate limit.
func (c *copier) emit(ctx context.Context, page offsets.Txn, raw []*string) (Key, error) {
	values := make(map[string]*string, len(raw))
	for i, name := range columnNames {
		values[name] = raw[i]
	}
	key := Key{AggregateType: deref(raw[1]), AggregateID: deref(raw[2])}
	fmt.Sscan(deref(raw[3]), &key.Version)
	ev, err := decode.MapRow(c.cfg.Decode, values)
	var rowErr *decode.RowError
	switch {
	case errors.As(err, &rowErr):
		q := cdc.Quarantined{LSN: c.job.ReadLSN, CommitLSN: c.job.ReadLSN, Table: c.cfg.Table, Columns: values, Reason: rowErr.Reason}
		return key, c.jobs.Quarantine(ctx, c.cfg.Schema, c.cfg.Slot, key, q)
	case err != nil:
		return key, err
	}
	ev.CommitLSN, ev.Backfill = c.job.ReadLSN, true
	c.pages.Add(page)
	if err := c.pub.Publish(ctx, ev, func() { c.pages.Confirm(page) }); err != nil {
		return key, fmt.Errorf("publish: %w", err)
	}
	c.read++
	if c.cfg.Rate > 0 {
		due := c.began.Add(time.Duration(float64(c.read) / c.cfg.Rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return key, ctx.Err()
			}
		}
	}
	return key, nil
}

// progress stores the newest fully confirmed page's key (at most once a second unless forced).
func (c *copier) progress(ctx context.Context, force bool) error {
	w := c.pages.Watermark()
	m, ok := c.marks[w]
	if ok {
		for end := range c.marks {
			if end < w {
				delete(c.marks, end)
			}
		}
		c.rep.Update(m.done, c.job.RowsTotal)
	}
	if !ok || (!force && time.Since(c.saved) < time.Second) {
		return nil
	}
	c.job.LastKey, c.job.RowsDone = &m.last, m.done
	c.saved = time.Now()
	return c.jobs.Progress(ctx, c.job.Name, m.last, m.done, c.job.RowsTotal)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
