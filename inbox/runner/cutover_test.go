package runner_test

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox/runner"
)

// The documented cutover from one plain queue to a group and back (docs/consumer-groups.md, "Changing the
// number of partitions"), under a stream that runs through both: two instances on the plain queue (single
// active consumer), Cutover to a group of 3 partitions, the plain queue drained and its instances stopped,
// two group instances started; then Cutover back to the plain queue, the partitions drained and their
// instances stopped, two plain instances started. Every event is applied once, in order, none parked, and
// each of the three phases applied some.
func TestGroupCutoverFromAPlainQueueAndBack(t *testing.T) {
	l := newGroupLab(t)
	plain, group := l.config(4), l.groupConfig(3)
	plain.SingleActiveConsumer, plain.Registerer = true, nil
	stopA, stopB := l.instance("a", plain), l.instance("b", plain)
	l.waitFor("two plain instances", 10*time.Second, func() bool { return strings.Count(l.logs.String(), "inbox runner consuming") >= 2 })
	events := oneDigitStream("p", 100, 200) // more than the test publishes: it stops the stream itself
	done, enough := make(chan struct{}), make(chan struct{})
	var published atomic.Int64
	go func() { // publishes until enough is closed: the stream runs through both cutovers
		defer close(done)
		for i := 0; i < len(events) && l.Ctx.Err() == nil; i += 20 {
			select {
			case <-enough:
				return
			default:
			}
			l.publishBucketed(events[i : i+20])
			published.Store(int64(i + 20))
			time.Sleep(50 * time.Millisecond) // slower than the instances apply: no cutover is behind a backlog
		}
	}()
	t.Cleanup(func() { <-done })
	l.waitFor("300 applied", 30*time.Second, func() bool { return l.applied.Load() >= 300 })

	began := time.Now()
	phase := func(what string) {
		t.Logf("%5.1fs  %s, %d applied", time.Since(began).Seconds(), what, l.applied.Load())
	}
	atGroup := l.cutover(plain, group, stopA, stopB)
	phase("cut over to the group")
	stopC, stopD := l.instance("c", group), l.instance("d", group)
	l.waitFor("the group applies", 30*time.Second, func() bool { return l.applied.Load() >= atGroup+300 })
	phase("the group applies")

	atPlain := l.cutover(group, plain, stopC, stopD)
	phase("cut over to the plain queue")
	l.instance("e", plain)
	l.instance("f", plain)
	l.waitFor("the plain queue applies", 30*time.Second, func() bool { return l.applied.Load() >= atPlain+100 })
	phase("the plain queue applies")
	close(enough)
	<-done
	events = events[:published.Load()]
	l.waitFor("every event applied", 30*time.Second, func() bool { return l.applied.Load() >= int64(len(events)) })
	time.Sleep(300 * time.Millisecond) // a late duplicate application would show now
	l.checkExact(events)
	summary(t, "%d events; plain queue to a group of 3 partitions at %d applied, back to the plain queue at %d; 0 parked; "+
		"both cutovers in %.1f s", len(events), atGroup, atPlain, time.Since(began).Seconds())
}

// cutover runs the documented procedure from prev to next while the stream goes on: Cutover, wait until
// prev's queues are drained, stop prev's instances, and check that prev's queues hold nothing. It returns
// the events applied by then; the caller starts next's instances.
//
// Drained is what the procedure's rabbitmqctl list_queues checks (no message ready or unacknowledged);
// the test reads it without rabbitmqctl, which takes seconds on the shared broker's many queues: no message
// ready (a passive declare) and no event applied for a second (prev's queues receive nothing after the
// Cutover and next's instances have not started, so the instances' unacknowledged deliveries are done),
// then, after the stop, with no consumer left, no message at all (a passive declare then counts every one).
func (l *groupLab) cutover(prev, next runner.Config, stops ...func() error) int64 {
	l.T.Helper()
	if err := runner.Cutover(l.Ctx, prev, next, l.logger()); err != nil {
		l.T.Fatalf("Cutover from %d to %d partitions: %v", prev.Partitions, next.Partitions, err)
	}
	last, since := l.applied.Load(), time.Now()
	l.waitFor("the old queues drained", 30*time.Second, func() bool {
		if n := l.applied.Load(); n != last {
			last, since = n, time.Now()
		}
		ready, _ := l.queuesHold(prev)
		return ready == 0 && time.Since(since) >= time.Second
	})
	for _, stop := range stops {
		if err := stop(); err != nil {
			l.T.Fatalf("an instance of %d partitions: %v", prev.Partitions, err)
		}
	}
	if messages, consumers := l.queuesHold(prev); messages != 0 || consumers != 0 {
		l.T.Fatalf("the queues of %d partitions hold %d events and %d consumers after their instances stopped",
			prev.Partitions, messages, consumers)
	}
	return l.applied.Load()
}

// queuesHold is the ready messages and the consumers of cfg's queues (its partitions, or Queue for
// Partitions 0), summed.
func (l *groupLab) queuesHold(cfg runner.Config) (ready, consumers int) {
	l.T.Helper()
	names := []string{cfg.Queue}
	if cfg.Partitions > 0 {
		names = nil
		for i := range cfg.Partitions {
			names = append(names, cfg.PartitionQueue(i))
		}
	}
	ch := l.Channel()
	defer ch.Close()
	for _, name := range names {
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		if err != nil {
			l.T.Fatalf("inspect queue %s: %v", name, err)
		}
		ready, consumers = ready+q.Messages, consumers+q.Consumers
	}
	return ready, consumers
}
