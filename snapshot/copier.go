package snapshot

import (
	"context"
	"fmt"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/quarantine"
)

// mark is what the progress store needs once every row up to a page end is confirmed.
type mark struct {
	last *Key // nil while no key has been confirmed (only rows with a NULL key part so far)
	done int64
}

// Copy publishes every row of the job after its last key, in key order, storing progress whenever every
// row up to a page end is confirmed (at most once a second, and at the end), then marks the job done.
// Where the key columns allow NULL, the rows with a NULL key part come last, in a pass of their own.
// A row that cannot become an event, or whose event the publisher refuses as unpublishable, is
// quarantined under cfg.Slot and counts as done. It returns the finished job.
func Copy(ctx context.Context, cfg Config, q Querier, jobs *Jobs, job Job, pub Publisher, rep *Reporter) (Job, error) {
	c := newCopier(cfg.withDefaults(), q, jobs, job, pub, rep)
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

func newCopier(cfg Config, q Querier, jobs *Jobs, job Job, pub Publisher, rep *Reporter) *copier {
	return &copier{cfg: cfg, q: q, jobs: jobs, job: job, pub: pub, rep: rep, pages: offsets.NewTracker(1),
		quar: quarantine.NewStore(jobs.conn, cfg.Schema, cfg.Slot), marks: map[cdc.LSN]mark{}, began: time.Now(),
		net: rowNet{refusals: cdc.NewRefusals(cfg.RefusalRetry)}}
}

type copier struct {
	cfg      Config
	q        Querier
	jobs     *Jobs
	job      Job
	pub      Publisher
	rep      *Reporter
	quar     *quarantine.Store
	keys     keyset           // the order pages are read in
	mapped   *mappedTable     // the table read through its mapping (--config); nil for the native shape
	nullable bool             // a key column allows NULL
	pages    *offsets.Tracker // a page is a "transaction" whose end is its number
	marks    map[cdc.LSN]mark
	page     cdc.LSN
	prev     *mark // mark of the last page that had rows
	read     int64 // rows read by this process, for the rate limit
	began    time.Time
	saved    time.Time
	net      rowNet // the copy's safety net (refusals.go)
}

// run copies until done, going on with a new publisher after a per-message refusal (refusals.go).
func (c *copier) run(ctx context.Context) error {
	for {
		err := c.copyAll(ctx)
		if err != nil && ctx.Err() != nil {
			c.settle(c.cfg.stopBounds())
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		again, rerr := c.refused(ctx, err)
		if rerr != nil {
			return rerr
		}
		if !again {
			return err
		}
	}
}

// settle is the stop path: it lets the confirms of the pages already read arrive until by and stores how
// far they reach before end, so that the next start resumes as late as possible.
func (c *copier) settle(by, end time.Time) {
	deadline := by
	for c.pages.Watermark() < c.page+1 && time.Now().Before(deadline) {
		select {
		case <-c.pub.Failed():
			deadline = time.Now()
		case <-c.pages.Advanced():
		case <-time.After(100 * time.Millisecond):
		}
	}
	ctx, cancel := context.WithDeadline(context.Background(), end)
	defer cancel()
	c.progress(ctx, true)
}

func (c *copier) copyAll(ctx context.Context) error {
	var err error
	if c.cfg.mapping() != nil {
		if c.mapped, err = readMappedTable(ctx, c.cfg, c.q); err != nil {
			return err
		}
	} else if c.keys, err = readKeyset(ctx, c.cfg, c.q); err != nil {
		return err
	}
	if c.mapped == nil {
		if c.nullable, err = nullableKey(ctx, c.cfg, c.q, c.keys); err != nil {
			return err
		}
	}
	after, read := c.job.LastKey, c.job.RowsDone
	for {
		if err := c.keepUp(ctx); err != nil {
			return err
		}
		sql, args := c.cfg.pageQuery(c.keys, after, c.nullable)
		if c.mapped != nil {
			sql, args = c.mapped.pageQuery(c.cfg, after)
		}
		n, last, err := c.copyPage(ctx, sql, args, read, true)
		if err != nil {
			return err
		}
		read += int64(n)
		if n < c.cfg.PageSize {
			break
		}
		after = &last
	}
	if c.nullable {
		if _, _, err := c.copyPage(ctx, c.cfg.nullKeyQuery(c.keys), nil, read, false); err != nil {
			return err
		}
	}
	return c.drain(ctx)
}

// pagesAhead is how many pages may be published and not yet confirmed when the next one is read: the one
// before it, so that reading overlaps the confirms. It bounds what a crash copies again (the stored progress
// is the last page whose rows, and every row before them, are confirmed) now that the publisher no longer
// blocks on a run of one aggregate's rows, which the key order produces (route holds them aside, ADR 0009).
const pagesAhead = 1

// keepUp waits, storing progress as the confirms arrive, until at most pagesAhead pages are unconfirmed.
func (c *copier) keepUp(ctx context.Context) error { return c.waitPages(ctx, pagesAhead) }

// waitPages waits until at most n pages are unconfirmed, storing progress as the confirms arrive; it returns
// the publisher's failure or ctx's end first.
func (c *copier) waitPages(ctx context.Context, n int) error {
	for c.pages.InFlight() > n {
		select {
		case <-c.pub.Failed():
			return cdc.BrokerFailure(fmt.Errorf("publish: %w", c.pub.Err()))
		case <-ctx.Done():
			return ctx.Err()
		case <-c.pages.Advanced():
			if err := c.progress(ctx, false); err != nil {
				return err
			}
		case <-time.After(time.Second):
		}
	}
	return nil
}

// drain waits until every row published is confirmed, storing progress as it goes, then stores it.
func (c *copier) drain(ctx context.Context) error {
	if err := c.waitPages(ctx, 0); err != nil {
		return err
	}
	return c.progress(ctx, true)
}

// copyPage reads one page (keyed: in key order, else the NULL-key pass, whose rows carry their ctid) and
// publishes or quarantines its rows; it returns the number of rows and the last key.
func (c *copier) copyPage(ctx context.Context, sql string, args []any, doneBefore int64, keyed bool) (int, Key, error) {
	rows, err := c.q.Query(ctx, sql, args...)
	if err != nil {
		return 0, Key{}, explainQuery(err, c.cfg)
	}
	defer rows.Close()
	page := c.pages.Begin()
	var last Key
	n := 0
	for rows.Next() {
		width := len(columnNames) + len(c.keys.extra)
		if !keyed {
			width++ // the ctid
		}
		if c.mapped != nil {
			width = len(c.mapped.cols)
		}
		raw := make([]*string, width)
		dest := make([]any, len(raw))
		for i := range raw {
			dest[i] = &raw[i]
		}
		if err := rows.Scan(dest...); err != nil {
			return 0, Key{}, fmt.Errorf("read row: %w", err)
		}
		c.net.at = doneBefore + int64(n)
		careful := c.net.careful()
		if last, err = c.emit(ctx, page, raw, !keyed); err != nil {
			return 0, Key{}, err
		}
		n++
		if careful && keyed { // confirmed or quarantined, as every row before it
			k := last
			c.net.done = &mark{last: &k, done: doneBefore + int64(n)}
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, Key{}, explainQuery(err, c.cfg)
	}
	return n, last, c.endPage(ctx, page, n, last, doneBefore, keyed)
}

// endPage commits a page of n rows, the last of them at last, and stores progress when it is due.
func (c *copier) endPage(ctx context.Context, page offsets.Txn, n int, last Key, doneBefore int64, keyed bool) error {
	c.page++
	c.pages.Commit(page, c.page+1)
	if n > 0 {
		m := mark{last: &last, done: doneBefore + int64(n)}
		if !keyed { // the NULL-key pass moves no key
			m.last = c.job.LastKey
			if c.prev != nil {
				m.last = c.prev.last
			}
		}
		c.prev = &m
	}
	if c.prev != nil {
		c.marks[c.page+1] = *c.prev
	}
	return c.progress(ctx, false)
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
	c.job.LastKey, c.job.RowsDone = m.last, m.done
	c.saved = time.Now()
	return c.jobs.progress(ctx, c.job.Name, m.last, m.done, c.job.RowsTotal)
}
