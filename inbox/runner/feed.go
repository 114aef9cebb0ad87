package runner

import (
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// feed is one consumer on one channel: the session's queue, or one partition of a group. Its deliveries'
// acknowledgements are void once it is dead (the broker has requeued them), so the dispatcher drops those it
// has not started.
//
// A partition's feed holds what it does not process instead of requeueing it: on a release (the partition
// goes to another instance) or a stop, the deliveries it has not started stay unacknowledged, and once the
// handlers it started have settled theirs (held is 0) its channel is closed. RabbitMQ then returns every
// unacknowledged delivery to the queue and removes the consumer in one step, so the next single active
// consumer starts at the oldest event not applied. A basic.cancel first would hand the queue over at once,
// behind the deliveries still held here, and the next instance could apply an aggregate's later version
// before this one requeued the earlier.
type feed struct {
	ch    *amqp.Channel
	queue string
	tag   string
	part  int  // the partition, -1 for the session's queue
	hold  bool // leave unprocessed deliveries unacknowledged for the channel's close (partitions)

	dead atomic.Bool

	mu      sync.Mutex
	held    int  // deliveries submitted and neither settled nor dropped
	leaving bool // take no more deliveries; close emptied when held reaches 0
	emptied chan struct{}
}

func newFeed(ch *amqp.Channel, queue, tag string, part int, hold bool) *feed {
	return &feed{ch: ch, queue: queue, tag: tag, part: part, hold: hold, emptied: make(chan struct{})}
}

// enter counts a delivery as held; false once the feed is leaving (the delivery is then left unacknowledged).
func (f *feed) enter() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.leaving {
		return false
	}
	f.held++
	return true
}

// settled counts one delivery of the feed as acknowledged, requeued or dropped.
func (f *feed) settled() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.held--
	f.checkEmptied()
}

// leave makes the feed take no more deliveries; emptied is closed once the held ones are settled.
func (f *feed) leave() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.leaving = true
	f.checkEmptied()
}

func (f *feed) isLeaving() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.leaving
}

func (f *feed) checkEmptied() {
	if f.leaving && f.held <= 0 {
		select {
		case <-f.emptied:
		default:
			close(f.emptied)
		}
	}
}

// requeue returns a delivery the runner will not process now: a nack with requeue, or, on a partition,
// nothing (the channel's close returns it in order).
func (j *job) requeue() {
	if !j.f.hold {
		_ = j.d.Nack(false, true)
	}
}
