package runner

import (
	"time"

	"github.com/cdc-router/cdc-router/inbox"
)

// maxGapEntries bounds the per-event Gap counts kept for backoff; past it they start again from zero
// (an event that left the queue another way would otherwise stay counted forever).
const maxGapEntries = 100_000

// retryLater keeps l, with its head j, on a timer for j's backoff, then hands it back to the workers:
// the other aggregates proceed meanwhile, and the later events of j's aggregate wait behind it so that
// their order holds. The backoff counts j's own failures only (or the event's durable count, after a
// reconnect or a restart). After inbox.Config.MaxAttempts Process itself records the event as failed and
// returns the Failed outcome, which is acknowledged.
func (d *dispatcher) retryLater(l *lane, j *job, cause error) {
	wait := backoff(max(j.fails, inbox.FailedAttempts(cause)), d.r.cfg.RetryMin, d.r.cfg.RetryMax)
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		j.requeue()
		d.pass(l, 1)
		return
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		delete(d.timers, t)
		d.push(l)
	})
	d.timers[t] = func() {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.push(l) // a worker sees the stop and requeues the lane
	}
	d.mu.Unlock()
	d.r.m.retried()
	log := d.r.log.Warn
	if !inbox.IsTransient(cause) {
		log = d.r.log.Error
	}
	log("inbox runner event failed, retrying", "event_id", j.ev.ID, "aggregate_type", j.ev.AggregateType,
		"aggregate_id", j.ev.AggregateID, "version", j.ev.AggregateVersion, "attempt", j.fails, "delay", wait,
		"error", cause)
}

// requeueLater requeues j, which is ahead of a gap (policy Requeue), after its backoff, from a timer: its
// lane goes on at once, so a missing event right behind it in the lane is processed meanwhile. j stays
// held (unacknowledged, counted in the prefetch) until then.
func (d *dispatcher) requeueLater(j *job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		j.requeue()
		j.f.settled()
		d.held--
		d.checkIdle()
		return
	}
	if len(d.gaps) >= maxGapEntries {
		clear(d.gaps)
	}
	d.gaps[j.ev.ID]++
	wait := backoff(d.gaps[j.ev.ID], d.r.cfg.RetryMin, d.r.cfg.RetryMax)
	requeue := func() {
		_ = j.d.Nack(false, true) // a real requeue: the event goes back to the queue's head, to this consumer
		j.f.settled()
		d.release(1)
	}
	var t *time.Timer
	t = time.AfterFunc(wait, func() {
		d.mu.Lock()
		delete(d.timers, t)
		d.mu.Unlock()
		requeue()
	})
	d.timers[t] = requeue
	d.r.log.Debug("inbox runner event ahead of a gap, requeued later", "event_id", j.ev.ID, "delay", wait)
}

// forgetGaps drops j's Gap count once its delivery is settled for good.
func (d *dispatcher) forgetGaps(j *job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.gaps, j.ev.ID)
}
