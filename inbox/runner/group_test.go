package runner_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/route/message"
)

// The runner's copy of the bucket header and count is the router's.
func TestBucketsMatchTheRouter(t *testing.T) {
	ev := order("o-1", 1, 1)
	d := amqp.Delivery{MessageId: ev.ID, Type: ev.Type, Body: ev.Payload, Headers: amqp.Table{
		"aggregate_type": "order", "aggregate_id": "o-1", "aggregate_version": int64(1), "schema_version": int32(1),
		message.HeaderAggregateBucket: message.Bucket("order", "o-1")}}
	got, err := runner.DecodeDelivery(d)
	if err != nil || len(got.Headers) != 0 {
		t.Errorf("DecodeDelivery: %v, headers %v (aggregate_bucket is not a user header)", err, got.Headers)
	}
	c := runner.Config{Queue: "q", Partitions: message.Buckets}
	if c.PartitionQueue(message.Buckets-1) != fmt.Sprintf("q.%d-of-%d", message.Buckets-1, message.Buckets) {
		t.Errorf("partition names")
	}
	c = runner.Config{URLs: []string{"amqp://localhost/"}, Queue: "q", Bindings: []string{"#"}, Partitions: message.Buckets + 1}.Defaults()
	if err := c.Validate(); err == nil {
		t.Errorf("Partitions %d (one more than the router's buckets) accepted", message.Buckets+1)
	}
}

// groupLab is a runner lab whose events go to a partitioned group: published with the router's
// aggregate_bucket header, and nothing declared ahead (the runners declare the group).
type groupLab struct {
	*runnerLab
	mu      sync.Mutex
	byInst  map[string]int // events applied, by instance
	parked  atomic.Int64
	applied atomic.Int64
}

func newGroupLab(t *testing.T) *groupLab {
	l := &groupLab{runnerLab: newRunnerLab(t), byInst: map[string]int{}}
	deleteQueue(t, l.queue) // the lab's plain queue: the group's queues are named after it
	return l
}

func (l *groupLab) groupConfig(partitions int) runner.Config {
	cfg := l.config(4)
	cfg.Partitions = partitions
	cfg.RebalanceInterval = 200 * time.Millisecond
	cfg.Registerer = nil
	l.T.Cleanup(func() {
		c, err := amqp.Dial(cfg.URLs[0])
		if err != nil {
			return
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return
		}
		for i := range partitions {
			ch.QueueDelete(cfg.PartitionQueue(i), false, false, false)
		}
		for k := range 2*partitions + 4 {
			ch.QueueDelete(fmt.Sprintf("%s.partitions-%d.member-%d", cfg.Queue, partitions, k), false, false, false)
		}
		ex := fmt.Sprintf("%s.partitions-%d", cfg.Queue, partitions)
		ch.ExchangeDelete(ex, false, false)
		ch.QueueDelete(ex+".unrouted", false, false, false)
		ch.ExchangeDelete(ex+".unrouted", false, false)
	})
	return cfg
}

// instance starts one member of the group; its applied events are counted under name.
func (l *groupLab) instance(name string, cfg runner.Config) (stop func() error) {
	cfg.OnOutcome = func(ev inbox.Event, res inbox.Result, err error) {
		if err != nil {
			return
		}
		switch res.Outcome {
		case inbox.Applied:
			l.applied.Add(1)
			l.mu.Lock()
			l.byInst[name]++
			l.mu.Unlock()
		case inbox.Parked:
			l.parked.Add(1)
		}
	}
	return l.start(l.processor(inbox.Config{}), cfg)
}

// publishBucketed publishes events as cdc-router does, with their aggregate_bucket.
func (l *groupLab) publishBucketed(events []inbox.Event) {
	l.T.Helper()
	ctx, cancel := context.WithTimeout(l.Ctx, time.Minute)
	defer cancel()
	var confirms []*amqp.DeferredConfirmation
	for _, ev := range events {
		headers := amqp.Table{"aggregate_type": ev.AggregateType, "aggregate_id": ev.AggregateID,
			"aggregate_version": ev.AggregateVersion, "schema_version": ev.SchemaVersion,
			message.HeaderAggregateBucket: message.Bucket(ev.AggregateType, ev.AggregateID)}
		dc, err := l.Pub.PublishWithDeferredConfirmWithContext(ctx, l.Exchange, ev.AggregateType+"."+ev.Type, true, false,
			amqp.Publishing{MessageId: ev.ID, Type: ev.Type, ContentType: "application/json", Body: ev.Payload,
				Headers: headers, DeliveryMode: amqp.Persistent, Timestamp: time.Now()})
		if err != nil {
			l.T.Fatalf("publish %s: %v", ev.ID, err)
		}
		confirms = append(confirms, dc)
	}
	for _, dc := range confirms {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			l.T.Fatalf("publish: confirm ack=%v err=%v", ok, err)
		}
	}
}

// checkExact asserts what a user checks: every event applied once, the amounts the truth, nothing parked.
func (l *groupLab) checkExact(events []inbox.Event) {
	l.T.Helper()
	truth := map[string]int64{}
	for _, ev := range events {
		truth[ev.AggregateID] += int64(ev.Payload[10] - '0') // set below: deltas of one digit
	}
	want(l.T, "applied log rows", l.Count(`SELECT count(*) FROM applied_log`), int64(len(events)))
	want(l.T, "distinct applied events", l.Count(`SELECT count(DISTINCT event_id) FROM applied_log`), int64(len(events)))
	want(l.T, "parked rows", l.Count(`SELECT count(*) FROM inbox.parked`), 0)
	want(l.T, "parked outcomes", l.parked.Load(), 0)
	for id, amount := range truth {
		if got := l.Amount(id); got != amount {
			l.T.Errorf("amount of %s = %d, want %d", id, got, amount)
		}
	}
}

// oneDigitStream is versions 1..versions of aggregates orders, interleaved, each adding a one-digit delta.
func oneDigitStream(prefix string, aggregates, versions int) []inbox.Event {
	var events []inbox.Event
	for v := 1; v <= versions; v++ {
		for a := range aggregates {
			ev := order(fmt.Sprintf("%s-%d", prefix, a), int64(v), 0)
			ev.Payload = fmt.Appendf(nil, `{"delta": %d}`, (a+v)%10) // byte 10 is the digit
			events = append(events, ev)
		}
	}
	return events
}

// Three instances of a group of four partitions: the runners declare the group, each instance applies
// a share, one stopped mid-stream and one started hand their partitions over, and every event is applied
// once, in order, none parked.
func TestGroupSharesPartitionsAndHandsThemOver(t *testing.T) {
	l := newGroupLab(t)
	cfg := l.groupConfig(4)
	stopA := l.instance("a", cfg)
	l.waitFor("the group declared", 10*time.Second, func() bool { return l.logs.contains("inbox runner rebalanced") })
	stopB := l.instance("b", cfg)
	_ = l.instance("c", cfg)
	events := oneDigitStream("g", 60, 20)
	l.waitFor("three members", 10*time.Second, func() bool { return strings.Count(l.logs.String(), "members=3") >= 3 })
	l.publishBucketed(events[:600])
	l.waitFor("the first half applied", 30*time.Second, func() bool { return l.applied.Load() >= 600 })
	if err := stopA(); err != nil {
		t.Fatalf("instance a: %v", err)
	}
	d := l.instance("d", cfg)
	l.publishBucketed(events[600:])
	if err := stopB(); err != nil {
		t.Fatalf("instance b: %v", err)
	}
	l.waitFor("every event applied", 30*time.Second, func() bool { return l.applied.Load() >= int64(len(events)) })
	time.Sleep(300 * time.Millisecond) // a late duplicate application would show now
	l.checkExact(events)
	l.mu.Lock()
	shares := fmt.Sprint(l.byInst)
	busy := 0
	for _, n := range l.byInst {
		if n > 0 {
			busy++
		}
	}
	l.mu.Unlock()
	if busy < 3 {
		t.Errorf("events applied by instance: %s; want at least 3 instances busy", shares)
	}
	summary(t, "1,200 events, 60 aggregates, 4 partitions, instances a b c then c d: applied by instance %s, 0 parked", shares)
	_ = d
}

// The group's exchange and partition queues are declared on every connect and refused, naming the fix,
// when they exist with other arguments.
func TestGroupRefusesObjectsThatDiffer(t *testing.T) {
	l := newGroupLab(t)
	cfg := l.groupConfig(2)
	if _, err := l.Pub.QueueDeclare(cfg.PartitionQueue(1), true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	err := l.runUntilRefused(cfg)
	if err == nil || !strings.Contains(err.Error(), "x-single-active-consumer") || !strings.Contains(err.Error(), cfg.PartitionQueue(1)) {
		t.Errorf("Run over a partition queue without single active consumer = %v", err)
	} else {
		t.Logf("refused: %v", err)
	}
	l2 := newGroupLab(t)
	cfg2 := l2.groupConfig(2)
	if err := l2.Pub.ExchangeDeclare(cfg2.Queue+".partitions-2", "topic", true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	err = l2.runUntilRefused(cfg2)
	if err == nil || !strings.Contains(err.Error(), "headers exchange") {
		t.Errorf("Run over a group exchange of another type = %v", err)
	} else {
		t.Logf("refused: %v", err)
	}
}

// runUntilRefused runs a member until Run returns by itself (at most 10 s) and returns its error.
func (l *groupLab) runUntilRefused(cfg runner.Config) error {
	l.T.Helper()
	r, err := runner.New(l.processor(inbox.Config{}), cfg, l.logger())
	if err != nil {
		l.T.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(l.Ctx, 10*time.Second)
	defer cancel()
	err = r.Run(ctx)
	if ctx.Err() != nil {
		l.T.Errorf("Run did not return within 10 s")
	}
	return err
}

// Changing a group's partition count by the documented cutover, under a steady stream: two instances of 2
// partitions, Cutover to 3, the old partitions drained and their instances stopped, two instances of 3
// started; every event applied once, in order, none parked.
func TestGroupCutoverKeepsOrder(t *testing.T) {
	l := newGroupLab(t)
	old, next := l.groupConfig(2), l.groupConfig(3)
	stopA, stopB := l.instance("a", old), l.instance("b", old)
	l.waitFor("two members", 10*time.Second, func() bool { return strings.Count(l.logs.String(), "members=2") >= 2 })
	events := oneDigitStream("c", 40, 40)
	done, enough := make(chan struct{}), make(chan struct{})
	var published atomic.Int64
	go func() { // publishes until enough is closed: the stream runs through the whole cutover
		defer close(done)
		for i := 0; i < len(events) && l.Ctx.Err() == nil; i += 20 {
			select {
			case <-enough:
				return
			default:
			}
			l.publishBucketed(events[i : i+20])
			published.Store(int64(i + 20))
			time.Sleep(40 * time.Millisecond) // slower than the instances apply: the cutover is not behind a backlog
		}
	}()
	t.Cleanup(func() { <-done })
	l.waitFor("400 applied", 30*time.Second, func() bool { return l.applied.Load() >= 400 })
	if err := runner.Cutover(l.Ctx, old, next, l.logger()); err != nil {
		t.Fatalf("Cutover: %v", err)
	}
	// Empty means no message ready or unacknowledged (rabbitmqctl's messages column; a passive declare
	// counts the ready ones only): what the documented procedure waits for before stopping the old group.
	readyNone := func() bool {
		ch := l.Channel()
		defer ch.Close()
		for i := range 2 {
			if q, err := ch.QueueDeclarePassive(old.PartitionQueue(i), true, false, false, false, nil); err != nil || q.Messages > 0 {
				return false
			}
		}
		return true
	}
	oldEmpty := func() bool {
		if !readyNone() { // cheap; rabbitmqctl takes a second
			return false
		}
		out, err := testenv.Rabbitmqctl(t, "-q", "list_queues", "--no-table-headers", "name", "messages").Output()
		if err != nil {
			t.Fatalf("rabbitmqctl list_queues: %v", err)
		}
		found := 0
		for line := range strings.Lines(string(out)) {
			name, n, _ := strings.Cut(strings.TrimSpace(line), "\t")
			if name == old.PartitionQueue(0) || name == old.PartitionQueue(1) {
				found++
				if n != "0" {
					return false
				}
			}
		}
		return found == 2
	}
	l.waitFor("the old partitions drained", 30*time.Second, oldEmpty)
	for _, stop := range []func() error{stopA, stopB} {
		if err := stop(); err != nil {
			t.Fatalf("old instance: %v", err)
		}
	}
	if !oldEmpty() {
		t.Fatalf("the old partitions hold events after their instances stopped")
	}
	atCut := l.applied.Load()
	l.instance("c", next)
	l.instance("d", next)
	time.Sleep(time.Second)
	close(enough)
	<-done
	events = events[:published.Load()]
	l.waitFor("every event applied", 30*time.Second, func() bool { return l.applied.Load() >= int64(len(events)) })
	time.Sleep(300 * time.Millisecond)
	l.checkExact(events)
	if atCut >= int64(len(events)) {
		t.Errorf("every event was applied before the new group started: the cutover tested nothing")
	}
	summary(t, "%d events; 2 partitions cut over to 3 at %d applied; 0 parked", len(events), atCut)
}

// An event without aggregate_bucket (from a router that predates groups) reaches no partition: it is kept
// in the group's unrouted queue, never dropped, and the runner says so, naming the queue and the fix.
func TestGroupKeepsEventsWithoutABucket(t *testing.T) {
	l := newGroupLab(t)
	cfg := l.groupConfig(2)
	cfg.ExchangeWaitLog = 100 * time.Millisecond
	l.instance("a", cfg)
	l.waitFor("the group declared", 10*time.Second, func() bool { return l.logs.contains("inbox runner rebalanced") })
	l.publishAll([]inbox.Event{order("o-1", 1, 1)}) // no aggregate_bucket header
	l.waitFor("the error logged", 10*time.Second, func() bool {
		return l.logs.contains("events without the aggregate_bucket header") && l.logs.contains(cfg.Queue+".partitions-2.unrouted")
	})
	ch := l.Channel()
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(cfg.Queue+".partitions-2.unrouted", true, false, false, false, nil)
	if err != nil || q.Messages != 1 {
		t.Errorf("unrouted queue: %v, %d messages, want 1", err, q.Messages)
	}
	want(t, "applied", l.applied.Load(), 0)
}

// A group on quorum partition queues (a single node here; e2e's TestClusterConsumerGroup runs a cluster):
// two instances, one stopped mid-stream, whose partitions the other takes (its gauges say so), every event
// applied once, none parked.
func TestGroupOnQuorumQueues(t *testing.T) {
	l := newGroupLab(t)
	cfg := l.groupConfig(2)
	cfg.Quorum = true
	stopA := l.instance("a", cfg)
	withMetrics := cfg
	withMetrics.Registerer = l.reg
	l.instance("b", withMetrics)
	l.waitFor("two members", 10*time.Second, func() bool { return strings.Count(l.logs.String(), "members=2") >= 2 })
	l.waitFor("b's gauges", 5*time.Second, func() bool {
		return metric(t, l.reg, "cdc_router_inbox_group_members") == 2 && metric(t, l.reg, "cdc_router_inbox_group_partitions") == 1
	})
	events := oneDigitStream("q", 30, 10)
	l.publishBucketed(events[:150])
	l.waitFor("half applied", 30*time.Second, func() bool { return l.applied.Load() >= 150 })
	if err := stopA(); err != nil {
		t.Fatalf("instance a: %v", err)
	}
	l.waitFor("b takes both partitions", 5*time.Second, func() bool {
		return metric(t, l.reg, "cdc_router_inbox_group_members") == 1 && metric(t, l.reg, "cdc_router_inbox_group_partitions") == 2
	})
	l.publishBucketed(events[150:])
	l.waitFor("every event applied", 30*time.Second, func() bool { return l.applied.Load() >= int64(len(events)) })
	time.Sleep(300 * time.Millisecond)
	l.checkExact(events)
	ch := l.Channel()
	defer ch.Close()
	// A declaration with the same arguments succeeds only on a quorum queue with single active consumer.
	if _, err := ch.QueueDeclare(cfg.PartitionQueue(0), true, false, false, false,
		amqp.Table{"x-queue-type": "quorum", "x-single-active-consumer": true}); err != nil {
		t.Errorf("partition 0 is not a single-active-consumer quorum queue: %v", err)
	}
}
