package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
)

// The copy's safety net, the stream's own (replication's safetyNet) for rows: when the publisher fails with
// a refusal that one message can cause (cdc.PerMessage: a channel close with 406 or another per-message
// code, a 403 on an exchange of its own, a return from an exchange of its own, a nack), the copy does not
// fail. It takes a new publisher (Config.Renew), goes back to its last confirmed row and publishes the rows
// up to the furthest one it had read one at a time, each confirmed before the next is read, so that a
// repeated refusal names its row exactly. A row refused cdc.StrikesToQuarantine times in a row while alone
// in flight (a return or a nack: and for Config.RefusalRetry since the first) is quarantined with the
// broker's reason, and the copy goes on; after the furthest row read, rows are pipelined again.
type rowNet struct {
	refusals *cdc.Refusals
	until    int64  // rows before this position (rows of the job, counted from its start) go one at a time
	at       int64  // the position of the row being published
	alone    string // the id of the row that is the only message in flight, while one is
	backoff  time.Duration
	// done is the key and row count of the last row published alone and confirmed (or quarantined), when
	// it was read in key order: every row up to it is done, so a later refusal goes back to it rather than
	// to the start of its page, and does not publish the rows of the page before it again at every try.
	done *mark
}

// carefulBackoff bounds the wait between two publishers of the copy's safety net.
const carefulBackoff = 10 * time.Second

// careful reports whether the row being published goes alone.
func (n *rowNet) careful() bool { return n.at < n.until }

// refused takes the error that ended a pass of the copy and reports whether the copy goes on: the error
// was a per-message refusal and a new publisher was dialled. The copy's state is wound back to the later of
// its last confirmed page and its last row confirmed alone, whose key and row count are stored first.
func (c *copier) refused(ctx context.Context, err error) (bool, error) {
	if c.cfg.Renew == nil || !cdc.PerMessage(err) {
		c.net.alone = ""
		return false, nil
	}
	if err := c.rewind(ctx, err); err != nil {
		return false, err
	}
	pub, err := renewAfter(ctx, c.cfg, c.net.backoff, err)
	if err != nil {
		return false, err
	}
	c.pub = pub
	return true, nil
}

// rewind counts a per-message refusal against the row that was alone in flight (if one was), makes the rows
// up to the furthest one read go one at a time, and winds the copy's state back to the later of its last
// confirmed page and its last row confirmed alone, whose key and row count are stored first.
func (c *copier) rewind(ctx context.Context, err error) error {
	alone := c.net.alone
	c.net.alone = ""
	c.net.refusals.Strike(alone, err)
	c.net.until = max(c.net.until, c.net.at+1)
	c.net.backoff = min(max(2*c.net.backoff, 100*time.Millisecond), carefulBackoff)
	if alone == "" {
		c.net.backoff = 100 * time.Millisecond // a pipelined pass: find the row at once
	}
	c.logger().Warn("RabbitMQ refused a row: the rows after the last confirmed one are published one at a time, and one refused "+
		fmt.Sprint(cdc.StrikesToQuarantine)+" times in a row (a return or a nack: for --refusal-retry) is quarantined",
		"job", c.job.Name, "event_id", alone, "error", err, "backoff", c.net.backoff)
	if err := c.progress(ctx, true); err != nil {
		return err
	}
	if m, ok := c.marks[c.pages.Watermark()]; ok {
		c.job.LastKey, c.job.RowsDone = m.last, m.done
	}
	if d := c.net.done; d != nil && d.done > c.job.RowsDone {
		c.job.LastKey, c.job.RowsDone = d.last, d.done
		if err := c.jobs.progress(ctx, c.job.Name, d.last, d.done, c.job.RowsTotal); err != nil {
			return err
		}
	}
	c.pages, c.marks, c.page, c.prev = offsets.NewTracker(1), map[cdc.LSN]mark{}, 0, nil
	return nil
}

// renewAfter waits backoff, then dials the copy's new publisher (cfg.Renew); refusal is what made it needed.
// The wait ends with ctx: a router that lost its slot lock meanwhile ends it (replication's lease of the
// lock, seeds 8063 and 8110), and the run starts again (or stands by).
func renewAfter(ctx context.Context, cfg Config, backoff time.Duration, refusal error) (Publisher, error) {
	select {
	case <-time.After(backoff):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	pub, err := cfg.Renew(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w (and no new RabbitMQ connection after it: %w)", refusal, err)
	}
	return pub, nil
}

// condemned returns the quarantine reason of the row being published when the broker refused it often and
// long enough while it was alone in flight.
func (c *copier) condemned(id string) (string, bool) {
	reason, ok := c.net.refusals.Condemned(id)
	if !ok {
		return "", false
	}
	return fmt.Sprintf("RabbitMQ refused this row %d times in a row while it was the only message in flight: %s",
		cdc.StrikesToQuarantine, reason), true
}

// confirmedAlone waits for the confirm of the row published alone (confirmed is closed by its done).
func (c *copier) confirmedAlone(ctx context.Context, id string, confirmed <-chan struct{}) error {
	c.net.alone = id
	select {
	case <-confirmed:
	case <-c.pub.Failed():
		return cdc.BrokerFailure(fmt.Errorf("publish: %w", c.pub.Err()))
	case <-ctx.Done():
		return ctx.Err()
	}
	c.net.alone, c.net.backoff = "", 0
	c.net.refusals.Clear(id)
	return nil
}

// logger is the job's logger.
func (c *copier) logger() *slog.Logger {
	if c.rep == nil || c.rep.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.rep.log
}
