package runner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

// concurrency watches the handler: how many events of one aggregate, and of all, run at once.
type concurrency struct {
	mu         sync.Mutex
	running    map[string]int
	now, max   int
	sameAggMax int
}

func (c *concurrency) wrap(ctx context.Context, tx pgx.Tx, ev inbox.Event, next inbox.Handler) error {
	c.mu.Lock()
	if c.running == nil {
		c.running = map[string]int{}
	}
	c.running[ev.AggregateID]++
	c.sameAggMax = max(c.sameAggMax, c.running[ev.AggregateID])
	c.now++
	c.max = max(c.max, c.now)
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.running[ev.AggregateID]--
		c.now--
		c.mu.Unlock()
	}()
	return next(ctx, tx, ev)
}

// Events of many aggregates, interleaved across aggregates in per-aggregate order as the router
// publishes them, with duplicates: with 1, 4 and 8 workers on one channel every event is applied once,
// in order, an aggregate's events never run concurrently, and none is parked (the same stream consumed
// by 4 Consume channels parked 53 % in issue 13). The throughput is logged.
func TestRunnerOrderAndThroughput(t *testing.T) {
	const aggregates, versions = 100, 30
	for _, workers := range []int{1, 4, 8} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			l := newRunnerLab(t)
			var c concurrency
			l.wrap = c.wrap
			msgs, events := orderStream(uint64(workers), aggregates, versions, 10)
			l.publishAll(msgs)

			start := time.Now()
			stop := l.start(l.processor(inbox.Config{}), l.config(workers))
			l.waitFor("every event applied", time.Minute, func() bool {
				return l.Count(`SELECT count(*) FROM applied_log`) >= int64(len(events))
			})
			elapsed := time.Since(start)
			l.waitFor("every delivery acknowledged", 30*time.Second, func() bool {
				return metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "duplicate")+
					metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "applied") >= float64(len(msgs))
			})
			if err := stop(); err != nil {
				t.Fatalf("Run: %v", err)
			}

			want(t, "applications", l.Count(`SELECT count(*) FROM applied_log`), int64(len(events)))
			want(t, "distinct events applied", l.Count(`SELECT count(DISTINCT event_id) FROM applied_log`), int64(len(events)))
			want(t, "aggregates at the last version",
				l.Count(`SELECT count(*) FROM projection WHERE version = $1`, versions), int64(aggregates))
			want(t, "most events of one aggregate at once", c.sameAggMax, 1)
			parked := metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "parked")
			want(t, "parked outcomes", parked, 0)
			want(t, "errors", metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "error"), 0)
			want(t, "duplicates", metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", "duplicate"), float64(len(msgs)-len(events)))
			want(t, "messages left", l.queueMessages(), 0)
			summary(t, "workers=%d events=%d deliveries=%d elapsed=%v throughput=%.0f events/s parked=%.1f%% "+
				"most handlers at once=%d", workers, len(events), len(msgs), elapsed.Round(time.Millisecond),
				float64(len(events))/elapsed.Seconds(), 100*parked/float64(len(events)), c.max)
		})
	}
}

// The same stream through Processor.Consume on 4 channels, for comparison: the channels race each
// other on an aggregate's events, so some park. Logged, not asserted.
func TestRunnerBaselineConsumeChannels(t *testing.T) {
	const aggregates, versions, channels = 100, 30, 4
	l := newRunnerLab(t)
	// An event applied from the parked table shares its transaction with the event that closed its gap.
	if _, err := l.DB.Exec(l.Ctx, `ALTER TABLE applied_log ADD COLUMN tx bigint DEFAULT txid_current()`); err != nil {
		t.Fatal(err)
	}
	msgs, events := orderStream(4, aggregates, versions, 10)
	l.publishAll(msgs)
	p := l.processor(inbox.Config{Prefetch: 16})
	ctx, cancel := context.WithCancel(l.Ctx)
	var wg sync.WaitGroup
	start := time.Now()
	for range channels {
		ch := l.Channel()
		wg.Go(func() { runner.Consume(ctx, p, ch, l.queue) })
	}
	l.waitFor("every event applied", time.Minute, func() bool {
		return l.Count(`SELECT count(*) FROM applied_log`) >= int64(len(events))
	})
	elapsed := time.Since(start)
	cancel()
	wg.Wait()
	unparked := l.Count(`SELECT count(*) - count(DISTINCT tx) FROM applied_log`)
	summary(t, "Consume on %d channels: events=%d elapsed=%v throughput=%.0f events/s parked=%.1f%%",
		channels, len(events), elapsed.Round(time.Millisecond), float64(len(events))/elapsed.Seconds(),
		100*float64(unparked)/float64(len(events)))
}
