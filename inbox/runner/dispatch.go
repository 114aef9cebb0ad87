package runner

import (
	"context"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
)

// job is one delivery on its way through the dispatcher.
type job struct {
	d     amqp.Delivery
	ev    inbox.Event
	bad   error  // DecodeDelivery's error: the delivery is recorded as malformed
	f     *feed  // acknowledgements are void once it is dead
	key   string // the aggregate: aggregate_type NUL aggregate_id
	fails int    // Process errors of this delivery so far
}

func newJob(d amqp.Delivery, f *feed) *job {
	ev, err := DecodeDelivery(d)
	return &job{d: d, ev: ev, bad: err, f: f, key: ev.AggregateType + "\x00" + ev.AggregateID}
}

// lane is the FIFO of one aggregate's deliveries. A lane is in the dispatcher's map exactly while it
// holds a delivery, and then has exactly one owner: the ready list, the worker running its head, or the
// timer of its head's retry. So an aggregate's events never run concurrently and run in delivery order.
type lane struct {
	key   string
	queue []*job
}

// dispatcher runs deliveries on the runner's workers, one aggregate at a time, and keeps a failing
// delivery's retries and a Gap's requeue on timers, never on a worker or the channel.
type dispatcher struct {
	r    *Runner
	work context.Context // the handlers' context: a stop does not cancel it, the drain timeout does

	mu       sync.Mutex
	cond     *sync.Cond
	lanes    map[string]*lane
	ready    []*lane
	timers   map[*time.Timer]func() // pending timers and what to do instead when a stop stops them
	gaps     map[string]int         // event id -> Gap outcomes so far, for that delivery's backoff
	held     int                    // deliveries neither acknowledged, requeued nor dropped
	stopping bool                   // take no delivery, start no handler
	closed   bool                   // workers exit
	idle     chan struct{}          // closed once stopping with nothing held
}

func newDispatcher(r *Runner, work context.Context) *dispatcher {
	d := &dispatcher{r: r, work: work, lanes: map[string]*lane{}, timers: map[*time.Timer]func(){},
		gaps: map[string]int{}, idle: make(chan struct{})}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// submit queues j behind its aggregate's earlier deliveries. It returns false during a stop; the caller
// then requeues the delivery.
func (d *dispatcher) submit(j *job) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopping {
		return false
	}
	d.held++
	if l := d.lanes[j.key]; l != nil {
		l.queue = append(l.queue, j)
		return true
	}
	l := &lane{key: j.key, queue: []*job{j}}
	d.lanes[j.key] = l
	d.push(l)
	return true
}

// push hands l to the ready list. The caller holds mu and owns l.
func (d *dispatcher) push(l *lane) {
	d.ready = append(d.ready, l)
	d.cond.Signal()
}

// loop is one worker: it runs the head of each ready lane until the dispatcher is closed.
func (d *dispatcher) loop() {
	for {
		l, j := d.take()
		if l == nil {
			return
		}
		d.run(l, j)
	}
}

func (d *dispatcher) take() (*lane, *job) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(d.ready) == 0 {
		if d.closed {
			return nil, nil
		}
		d.cond.Wait()
	}
	l := d.ready[0]
	d.ready[0] = nil
	d.ready = d.ready[1:]
	return l, l.queue[0]
}

// run processes l's head j and settles it: ack after an outcome that is acknowledged, a requeue later
// for a Gap, a retry later for an error, a requeue now during a stop.
func (d *dispatcher) run(l *lane, j *job) {
	switch {
	case j.f.dead.Load():
		d.pass(l, 1) // its channel is gone and the broker has requeued it
		return
	case d.isStopping(), j.f.hold && j.f.isLeaving():
		j.requeue() // a partition's is left to its channel's close
		d.pass(l, 1)
		return
	}
	res, err := d.process(j)
	switch {
	case err == nil && res.Outcome.Ack():
		if err := j.d.Ack(false); err != nil {
			d.r.log.Debug("inbox runner ack failed; the redelivery will be a duplicate", "event_id", j.ev.ID, "error", err)
		}
		d.forgetGaps(j)
		d.pass(l, 1)
	case err == nil:
		d.requeueLater(j)
		d.pass(l, 0)
	case d.work.Err() != nil:
		j.requeue()
		d.pass(l, 1)
	default:
		j.fails++
		d.retryLater(l, j, err)
	}
}

// process runs Process (or records a malformed delivery as failed), then the metrics and the hook.
func (d *dispatcher) process(j *job) (inbox.Result, error) {
	var res inbox.Result
	var err error
	if j.bad != nil {
		res, err = d.r.p.RecordMalformed(d.work, j.ev, j.bad)
	} else {
		res, err = d.r.p.Process(d.work, j.ev)
	}
	d.r.m.processed(res, err, j.d.Timestamp)
	if hook := d.r.cfg.OnOutcome; hook != nil {
		hook(j.ev, res, err)
	}
	return res, err
}

// pass pops l's head, which the caller settled or handed to a timer, and passes the lane on: to the
// ready list, or out of the map when it is empty. During a stop the rest of the lane is requeued.
// released is how many deliveries the caller settled (0 or 1).
func (d *dispatcher) pass(l *lane, released int) {
	d.mu.Lock()
	if released == 1 {
		l.queue[0].f.settled()
	}
	l.queue[0] = nil
	l.queue = l.queue[1:]
	var rest []*job
	if d.stopping {
		rest, l.queue = l.queue, nil
	}
	if len(l.queue) == 0 {
		delete(d.lanes, l.key)
	} else {
		d.push(l)
	}
	d.mu.Unlock()
	for _, j := range rest {
		j.requeue()
		j.f.settled()
	}
	d.release(released + len(rest))
}

// release counts n deliveries as settled and reports idleness during a stop.
func (d *dispatcher) release(n int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held -= n
	d.checkIdle()
}

func (d *dispatcher) checkIdle() {
	if d.stopping && d.held == 0 {
		select {
		case <-d.idle:
		default:
			close(d.idle)
		}
	}
}

func (d *dispatcher) isStopping() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stopping
}

// stop makes the dispatcher take no delivery and start no handler; the lanes waiting on a retry go to
// the workers at once, to be requeued, and the delayed requeues of Gap outcomes happen at once.
func (d *dispatcher) stop() {
	d.mu.Lock()
	if d.stopping {
		d.mu.Unlock()
		return
	}
	d.stopping = true
	var now []func()
	for t, instead := range d.timers {
		if t.Stop() {
			now = append(now, instead)
		}
		delete(d.timers, t)
	}
	d.checkIdle()
	d.mu.Unlock()
	for _, f := range now {
		f()
	}
}

// close makes the workers return once the ready list is empty.
func (d *dispatcher) close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.closed = true
	d.cond.Broadcast()
}
