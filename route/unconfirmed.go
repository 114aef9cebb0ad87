package route

import (
	"log/slog"
	"time"
)

// UnconfirmedBound is how long a message written to RabbitMQ may wait for its confirm before the Router
// logs the wait (a WARN, once as it passes the bound) and Metrics.Unconfirmed makes the router unready: the
// broker then takes publishes and confirms none (a stuck quorum queue, a cluster without its majority, a node
// that accepts and never confirms). A healthy broker confirms within milliseconds; a loaded one (a full lane
// window on a busy 2-core machine, a quorum queue writing to a slow disk) within a second or two, and a
// quorum queue's leader election within a few seconds: 10 s stays clear of a broker that confirms slowly but
// steadily, and still comes 50 s before DefaultConfirmTimeout fails the Router. Only written messages count:
// an event held behind its aggregate, or queued and not written yet, waits on the router, not on the broker,
// so a hot aggregate's run never ages it (seed 8123 of the harness).
const UnconfirmedBound = 10 * time.Second

// unconfirmedTick is how often the Router looks at its oldest unconfirmed write for the WARN.
const unconfirmedTick = time.Second

// oldestWrite returns the oldest publishing written on r's lanes and not yet resolved, and its lane; nil
// and -1 when none is. Each lane's is the one its confirmLoop waits for (lane.writing): publishings are
// resolved in write order.
func (r *Router) oldestWrite() (*publishing, int) {
	var oldest *publishing
	lane := -1
	for _, l := range r.lanes {
		if p := l.writing.Load(); p != nil && (oldest == nil || p.sent.Before(oldest.sent)) {
			oldest, lane = p, l.id
		}
	}
	return oldest, lane
}

// watchUnconfirmed logs a WARN when the oldest write of the Router has waited bound for its confirm, once
// each time the wait begins to pass it (as readiness turns 503: seed 8100 of the harness, a broker that
// confirmed nothing for 400 s, said so only at each confirm timeout), looking every tick until the Router
// fails.
func (r *Router) watchUnconfirmed(bound, tick time.Duration) {
	defer r.wg.Done()
	t := time.NewTicker(tick)
	defer t.Stop()
	over := false
	for {
		select {
		case <-r.failed:
			return
		case <-t.C:
		}
		p, lane := r.oldestWrite()
		if p == nil || time.Since(p.sent) < bound {
			over = false
			continue
		}
		if !over {
			over = true
			r.log.Warn("RabbitMQ has not confirmed a message written to it: nothing is acknowledged until it does; look for a "+
				"stuck quorum queue, a cluster without its majority or a node that takes publishes and confirms none",
				slog.String("exchange", r.cfg.Exchange), slog.Int("lane", lane), slog.String("event_id", p.eventID),
				slog.Duration("waited", time.Since(p.sent).Round(100*time.Millisecond)), slog.Duration("bound", bound),
				slog.Duration("confirm_timeout", r.cfg.ConfirmTimeout))
		}
	}
}
