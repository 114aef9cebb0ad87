package runner

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// The partitioned consumer group (Config.Partitions). cdc-router sets the aggregate_bucket header on every
// message: a documented hash of aggregate_type and aggregate_id, 0 to 63 (route/message.Bucket). The
// runner declares, on every connect:
//
//   - a durable internal headers exchange, <Queue>.partitions-<N>, bound to the router's exchange with each
//     of Bindings (an exchange-to-exchange binding: every event the group wants reaches it);
//   - N durable partition queues, <Queue>.<i>-of-<N>, each with x-single-active-consumer and the queue
//     arguments of Config, bound to that exchange once per bucket b with b mod N = i ({x-match: all,
//     aggregate_bucket: b}). So each aggregate's events land in one partition, in order, and RabbitMQ
//     delivers a partition to one consumer at a time;
//   - member slots, <Queue>.partitions-<N>.member-<k>: an instance holds the lowest free one with an
//     exclusive consumer for as long as its connection lives, so the instances of a group know each other.
//
// Every RebalanceInterval each instance reads which slots are held (their consumer counts), takes its rank
// r among the M members, and consumes the partitions i with i mod M = r, releasing the others (feed).
// Instances that disagree for a moment (one saw a member come or go, the other not yet) never process a
// partition at once: the partition's single active consumer lets one receive, and the other waits.
//
// Nothing here needs a plugin, a policy or a broker setting: headers exchanges, exchange-to-exchange
// bindings, single active consumer and exclusive consumers are in RabbitMQ 3.8 and later, 3.13 and 4.x.

// headerAggregateBucket and buckets are route/message.HeaderAggregateBucket and message.Buckets (the
// runner imports nothing from the router; TestBucketsMatchTheRouter pins them equal).
const (
	headerAggregateBucket = "aggregate_bucket"
	buckets               = 64
)

// memberExpiry is the x-expires of a member slot's queue: it is deleted once nobody has held or declared it
// for that long.
const memberExpiry = 10 * time.Minute

func (c Config) partitionExchange() string {
	return fmt.Sprintf("%s.partitions-%d", c.Queue, c.Partitions)
}

// PartitionQueue is the name of partition i (0 to Partitions-1) of the group.
func (c Config) PartitionQueue(i int) string {
	return fmt.Sprintf("%s.%d-of-%d", c.Queue, i, c.Partitions)
}

// unroutedName names the fanout exchange and the queue that take the events no partition takes.
func (c Config) unroutedName() string { return c.partitionExchange() + ".unrouted" }

func (c Config) memberQueue(k int) string {
	return fmt.Sprintf("%s.member-%d", c.partitionExchange(), k)
}

// memberSlots is how many instances can be members at once; more wait for a slot (a member beyond N has
// no partition anyway, but is ready to take some).
func (c Config) memberSlots() int { return 2*c.Partitions + 4 }

// partitionBuckets are the buckets partition i of n receives.
func partitionBuckets(i, n int) []int32 {
	var bs []int32
	for b := i; b < buckets; b += n {
		bs = append(bs, int32(b))
	}
	return bs
}

// partitionOf is the partition of a bucket.
func partitionOf(bucket int32, n int) int { return int(bucket) % n }

// assigned are the partitions of the member of rank r among m (m >= 1) of a group of n partitions.
func assigned(r, m, n int) []int {
	var ps []int
	for p := r; p < n; p += m {
		ps = append(ps, p)
	}
	return ps
}

func (c Config) validatePartitions() error {
	switch {
	case c.Partitions < 0 || c.Partitions > buckets:
		return fmt.Errorf("inbox runner config: Partitions %d is not between 0 (no group) and %d (one bucket each)", c.Partitions, buckets)
	case c.Partitions == 0:
		return nil
	case c.RebalanceInterval < 0:
		return fmt.Errorf("inbox runner config: RebalanceInterval %v is negative", c.RebalanceInterval)
	case len(c.memberQueue(c.memberSlots())) > 255:
		return fmt.Errorf("inbox runner config: Queue %q is too long for a partitioned group (its member queues' names "+
			"pass AMQP's 255 bytes); shorten it", c.Queue)
	}
	return nil
}

// groupState is a session's membership and partition feeds.
type groupState struct {
	r      *Runner
	s      *session
	slot   int
	member *amqp.Channel
	probe  *amqp.Channel
	lost   chan error // a partition or member channel the broker closed

	mu    sync.Mutex
	feeds map[int]*feed
	owned []int // what the last rebalance chose, for the log

	warned time.Time // the last warning about unrouted events
}

// checkUnrouted logs an error, at most every ExchangeWaitLog, while the unrouted queue holds events.
func (g *groupState) checkUnrouted() error {
	c := g.r.cfg
	if time.Since(g.warned) < c.ExchangeWaitLog || g.probe == nil || g.probe.IsClosed() {
		return nil
	}
	q, err := g.probe.QueueDeclarePassive(c.unroutedName(), true, false, false, false, nil)
	if err != nil {
		return nil // deleted by hand: the next connect declares it again
	}
	if q.Messages > 0 {
		g.warned = time.Now()
		g.r.log.Error("inbox runner: events without the aggregate_bucket header reached the group and no partition: "+
			"they were published by a cdc-router older than consumer groups; upgrade the router, then move them "+
			"from the unrouted queue to the router's exchange (for example with a shovel) or replay them",
			"unrouted_queue", c.unroutedName(), "events", q.Messages)
	}
	return nil
}

// setupGroup declares the group's exchange, its binding to the router's exchange and the partition
// queues with their bindings, and claims a member slot.
func (r *Runner) setupGroup(s *session) error {
	ch, err := s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	s.ch = ch
	s.chClosed = ch.NotifyClose(make(chan *amqp.Error, 1))
	s.canceled = ch.NotifyCancel(make(chan string, 1))
	c := r.cfg
	ex := c.partitionExchange()
	// What no partition takes (an event without aggregate_bucket: published by a cdc-router from before it)
	// goes to the unrouted queue, which the runner watches, instead of being dropped.
	unrouted := c.unroutedName()
	if err := ch.ExchangeDeclare(unrouted, amqp.ExchangeFanout, true, false, true, false, nil); err != nil {
		return setupError("declare exchange "+unrouted, err, fmt.Sprintf("exchange %q exists and is not a durable internal "+
			"fanout exchange: delete it and let the runner declare it again", unrouted))
	}
	var unroutedArgs amqp.Table
	if t := c.queueType(); t != "" {
		unroutedArgs = amqp.Table{amqp.QueueTypeArg: t}
	}
	if _, err := ch.QueueDeclare(unrouted, true, false, false, false, unroutedArgs); err != nil {
		var ae *amqp.Error
		fix := ""
		if errors.As(err, &ae) {
			fix = queueMismatchFix(unrouted, ae.Reason)
		}
		return setupError("declare queue "+unrouted, err, fix)
	}
	if err := ch.QueueBind(unrouted, "", unrouted, false, nil); err != nil {
		return setupError("bind queue "+unrouted, err, "")
	}
	if err := ch.ExchangeDeclare(ex, amqp.ExchangeHeaders, true, false, true, false, amqp.Table{"alternate-exchange": unrouted}); err != nil {
		return setupError("declare exchange "+ex, err, fmt.Sprintf("exchange %q exists and is not a durable internal "+
			"headers exchange with alternate-exchange %q, which the partitioned group needs: delete it (nothing but "+
			"this group's runners should declare it) and let the runner declare it again", ex, unrouted))
	}
	for _, key := range c.Bindings {
		if err := ch.ExchangeBind(ex, key, c.Exchange, false, nil); err != nil {
			return setupError(fmt.Sprintf("bind exchange %s to %s with %q", ex, c.Exchange, key), err, "")
		}
	}
	args := c.queueArguments()
	if args == nil {
		args = amqp.Table{}
	}
	args[argSingleActiveConsumer] = true
	for i := range c.Partitions {
		q := c.PartitionQueue(i)
		if _, err := ch.QueueDeclare(q, true, false, false, false, args); err != nil {
			var ae *amqp.Error
			fix := ""
			switch {
			case errors.As(err, &ae) && strings.Contains(ae.Reason, "'"+argSingleActiveConsumer+"'"):
				fix = fmt.Sprintf("partition queue %q exists without single active consumer, which a partitioned group "+
					"needs (two instances would receive one aggregate's events at once): drain it, delete it and let the "+
					"runner declare it again", q)
			case errors.As(err, &ae):
				fix = queueMismatchFix(q, ae.Reason)
			}
			return setupError("declare queue "+q, err, fix)
		}
		for _, b := range partitionBuckets(i, c.Partitions) {
			if err := ch.QueueBind(q, "", ex, false, amqp.Table{"x-match": "all", headerAggregateBucket: b}); err != nil {
				return setupError(fmt.Sprintf("bind queue %s to %s for bucket %d", q, ex, b), err, "")
			}
		}
	}
	if err := ch.Qos(c.Prefetch, 0, false); err != nil {
		return brokerError("set prefetch", err)
	}
	s.tag = "inbox-" + rand.Text()
	g := &groupState{r: r, s: s, slot: -1, feeds: map[int]*feed{}, lost: make(chan error, 1)}
	s.group = g
	r.log.Info("inbox runner joined the partitioned group", "exchange", c.Exchange, "group_exchange", ex,
		"bindings", c.Bindings, "partitions", c.Partitions, "prefetch", c.Prefetch, "workers", c.Workers,
		"consumer_tag", s.tag)
	return nil
}

// claimSlot takes the lowest member slot no other instance holds, with an exclusive consumer on its queue.
// It returns false when every slot is held.
func (g *groupState) claimSlot() (bool, error) {
	c := g.r.cfg
	for k := range c.memberSlots() {
		ch, err := g.s.conn.Channel()
		if err != nil {
			return false, fmt.Errorf("open channel: %w", err)
		}
		q := c.memberQueue(k)
		if _, err := ch.QueueDeclare(q, true, false, false, false, memberArgs()); err != nil {
			_ = ch.Close()
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.NotFound { // in a cluster, its node is down: take another
				continue
			}
			return false, setupError("declare queue "+q, err, "")
		}
		if _, err := ch.Consume(q, g.s.tag+"-member", true, true, false, false, nil); err != nil {
			var ae *amqp.Error
			if errors.As(err, &ae) && ae.Code == amqp.AccessRefused { // in exclusive use: another member's
				continue
			}
			return false, brokerError("consume "+q, err)
		}
		g.slot, g.member = k, ch
		go g.watch(ch, "member slot "+q)
		return true, nil
	}
	return false, nil
}

func memberArgs() amqp.Table { return amqp.Table{"x-expires": memberExpiry.Milliseconds()} }

// watch reports on g.lost a channel the broker closed or whose consumer it cancelled.
func (g *groupState) watch(ch *amqp.Channel, what string) {
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	canceled := ch.NotifyCancel(make(chan string, 1))
	var err error
	select {
	case e, ok := <-closed:
		if !ok || e == nil {
			return // closed by the runner
		}
		err = brokerError(what, e)
	case tag := <-canceled:
		err = fmt.Errorf("%s: %w: RabbitMQ cancelled consumer %s (queue deleted, or its node is down)", what, ErrChannelClosed, tag)
	}
	select {
	case g.lost <- err:
	default:
	}
}

// members are the slots held now, in order. A slot whose queue cannot be read counts as free.
func (g *groupState) members() ([]int, error) {
	c := g.r.cfg
	var held []int
	for k := range c.memberSlots() {
		if k == g.slot {
			held = append(held, k)
			continue
		}
		if g.probe == nil || g.probe.IsClosed() {
			ch, err := g.s.conn.Channel()
			if err != nil {
				return nil, fmt.Errorf("open channel: %w", err)
			}
			g.probe = ch
		}
		q, err := g.probe.QueueDeclare(c.memberQueue(k), true, false, false, false, memberArgs())
		if err != nil {
			var ae *amqp.Error
			if !errors.As(err, &ae) {
				return nil, brokerError("read member slot", err)
			}
			continue
		}
		if q.Consumers > 0 {
			held = append(held, k)
		}
	}
	return held, nil
}

// rebalance claims a member slot if it has none, reads the members and consumes exactly this member's
// partitions: it starts the missing ones and releases the others.
func (g *groupState) rebalance(d *dispatcher) error {
	if g.slot < 0 {
		ok, err := g.claimSlot()
		if err != nil {
			return err
		}
		if !ok {
			g.r.log.Warn("inbox runner: every member slot of the group is held; waiting for one", "slots", g.r.cfg.memberSlots())
			return nil
		}
	}
	held, err := g.members()
	if err != nil {
		return err
	}
	_ = g.checkUnrouted()
	rank := slices.Index(held, g.slot)
	want := assigned(rank, len(held), g.r.cfg.Partitions)
	g.mu.Lock()
	var release []*feed
	for p, f := range g.feeds {
		if f.dead.Load() {
			delete(g.feeds, p)
			continue
		}
		if !slices.Contains(want, p) && !f.isLeaving() {
			release = append(release, f)
		}
	}
	var start []int
	for _, p := range want {
		if _, ok := g.feeds[p]; !ok {
			start = append(start, p)
		}
	}
	changed := !slices.Equal(g.owned, want)
	g.owned = want
	g.mu.Unlock()
	g.r.m.rebalanced(len(want), len(held))
	if changed {
		g.r.log.Info("inbox runner rebalanced", "member_slot", g.slot, "members", len(held), "partitions", want)
	}
	for _, f := range release {
		g.release(f)
	}
	for _, p := range start {
		if err := g.start(d, p); err != nil {
			return err
		}
	}
	return nil
}

// start consumes partition p on a channel of its own.
func (g *groupState) start(d *dispatcher, p int) error {
	c := g.r.cfg
	ch, err := g.s.conn.Channel()
	if err != nil {
		return fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Qos(c.Prefetch, 0, false); err != nil {
		_ = ch.Close()
		return brokerError("set prefetch", err)
	}
	q := c.PartitionQueue(p)
	tag := fmt.Sprintf("%s-p%d", g.s.tag, p)
	deliveries, err := ch.Consume(q, tag, false, false, false, false, nil)
	if err != nil {
		_ = ch.Close()
		return brokerError("consume "+q, err)
	}
	f := newFeed(ch, q, tag, p, true)
	g.mu.Lock()
	g.feeds[p] = f
	g.mu.Unlock()
	go g.watch(ch, "consume "+q)
	go func() {
		for dl := range deliveries {
			d.r.m.received(dl)
			if !f.enter() {
				continue // leaving: left unacknowledged, the channel's close returns it in order
			}
			if !d.submit(newJob(dl, f)) {
				f.settled() // stopping: likewise
			}
		}
		if !f.isLeaving() {
			f.dead.Store(true)
		}
	}()
	return nil
}

// release hands partition f to the next member: it takes no more of its deliveries, lets the handlers in
// flight settle theirs, then closes the channel, which returns the rest to the queue in order and removes
// the consumer at once.
func (g *groupState) release(f *feed) {
	f.leave()
	go func() {
		<-f.emptied
		_ = f.ch.Close()
		f.dead.Store(true)
		g.mu.Lock()
		if g.feeds[f.part] == f {
			delete(g.feeds, f.part)
		}
		g.mu.Unlock()
	}()
}

// consumeGroup rebalances every RebalanceInterval until ctx is cancelled (nil: the feeds take no more
// deliveries, and Run's drain settles the held ones before close returns the rest) or the connection, the
// member slot or a partition channel goes away.
func (s *session) consumeGroup(ctx context.Context, d *dispatcher) error {
	g := s.group
	t := time.NewTicker(d.r.cfg.RebalanceInterval)
	defer t.Stop()
	err := g.rebalance(d)
	for err == nil {
		select {
		case <-ctx.Done():
			d.stop()
			g.mu.Lock()
			for _, f := range g.feeds {
				f.leave()
			}
			g.mu.Unlock()
			return nil
		case e := <-s.closed:
			err = closeReason(e)
		case e := <-s.chClosed:
			err = closeReason(e)
		case err = <-g.lost:
		case <-t.C:
			err = g.rebalance(d)
		}
	}
	g.mu.Lock()
	for _, f := range g.feeds {
		f.dead.Store(true)
	}
	g.mu.Unlock()
	d.r.m.rebalanced(0, 0)
	return err
}

// close closes the partitions' channels, which returns their unacknowledged deliveries to the queues in
// order, and then the member slot's. Run calls it after the drain, or once the session is dead.
func (g *groupState) close() {
	g.mu.Lock()
	feeds := make([]*feed, 0, len(g.feeds))
	for _, f := range g.feeds {
		feeds = append(feeds, f)
	}
	g.mu.Unlock()
	for _, f := range feeds {
		f.dead.Store(true)
		if !f.ch.IsClosed() {
			_ = f.ch.Close()
		}
	}
	for _, ch := range []*amqp.Channel{g.probe, g.member} {
		if ch != nil && !ch.IsClosed() {
			_ = ch.Close()
		}
	}
}
