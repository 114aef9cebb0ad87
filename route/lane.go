package route

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// publishing is one event on its way through a lane, from the moment it is let through (a held event
// becomes one when it is).
type publishing struct {
	eventID  string
	exchange string // the Router's, or a mapped event's (amqp.topic.target=exchange)
	key      string
	agg      uint64          // aggregateHash of the event: the lane, and the aggregate for holds
	msg      amqp.Publishing // released once written
	size     int             // body and content header bytes, held in the Router's budget until resolved
	done     func()
	confirm  *amqp.DeferredConfirmation
	sent     time.Time // when it was written, for the confirm round trip
	deadline time.Time
}

// lane is one confirm-mode channel. publishLoop is the only writer of the channel; confirmLoop is the
// only reader of its notifications and resolves the publishings in the order they were written.
// Publish queues a publishing only when holds lets it through (fewer than AggregateWindow events of its
// aggregate unconfirmed); a held one is queued by confirmLoop, as a publishing built again from its event,
// once it has resolved a predecessor positively, behind whatever is queued already: with AggregateWindow
// over 1, events of its aggregate let through before it may still be queued, not yet written, and it must
// not pass them. A publishing holds one slot of the window while queued or sent, not while held (a held one
// takes over the slot of the predecessor whose confirm lets it through), so queued and sent never fill up
// and at most Window messages are queued or written; returns holds
// at most one return per slot, so the reader goroutine of amqp091 never waits on it. A publishing also holds its bytes in the Router's budget until it is resolved or, once the
// Router has failed, discarded by the goroutine that holds it.
type lane struct {
	r        *Router
	id       int
	ch       *amqp.Channel
	window   *window                // one unit per queued or sent publishing
	queued   chan *publishing       // Publish and confirmLoop (a held one let through) → publishLoop
	sent     chan *publishing       // publishLoop → confirmLoop, in delivery-tag order
	holds    *holds                 // at most AggregateWindow unconfirmed events per aggregate
	returns  chan amqp.Return       // basic.return, drained before each confirmation is acted on
	closes   chan *amqp.Error       // the channel's close (a connection close closes it too)
	returned map[string]amqp.Return // by message id: returns not yet matched to their confirmation
	// writing is the publishing confirmLoop resolves, which is the lane's oldest written and unresolved one
	// (publishings are resolved in write order), nil while it waits for none; read by oldestWrite. Held and
	// queued events are not written yet, so they never appear here.
	writing atomic.Pointer[publishing]
}

// openLane opens a channel in confirm mode with its notification listeners.
func openLane(r *Router, id int) (*lane, error) {
	ch, err := r.conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("open channel: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("enable publisher confirms: %w", err)
	}
	w := r.cfg.Window
	return &lane{
		r:        r,
		id:       id,
		ch:       ch,
		window:   newWindow(w, r.limiter),
		queued:   make(chan *publishing, w),
		sent:     make(chan *publishing, w),
		holds:    newHolds(r.cfg.AggregateWindow, r.held).narrowing(r.refused),
		returns:  ch.NotifyReturn(make(chan amqp.Return, w+1)),
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		returned: make(map[string]amqp.Return),
	}, nil
}

// laneOf picks the lane of an event by its aggregateHash, so one aggregate always goes through the same
// channel.
func laneOf(ev cdc.Event, lanes int) int { return int(aggregateHash(ev) % uint64(lanes)) }

// aggregateHash is the FNV-1a hash of (aggregate_type, aggregate_id).
func aggregateHash(ev cdc.Event) uint64 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(ev.AggregateType); i++ {
		h = (h ^ uint64(ev.AggregateType[i])) * prime
	}
	h = (h ^ 0) * prime // separator: ("ab","c") and ("a","bc") differ
	for i := 0; i < len(ev.AggregateID); i++ {
		h = (h ^ uint64(ev.AggregateID[i])) * prime
	}
	return h
}

// run runs the lane's two goroutines until the Router fails, then discards what is left in the lane.
func (l *lane) run() {
	defer l.r.wg.Done()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); l.publishLoop() }()
	go func() { defer wg.Done(); l.confirmLoop() }()
	wg.Wait()
	l.discard()
}

// discard releases the publishings left in queued, sent and holds once both loops have ended (the
// Router has failed): their bytes go back to the budget and their bodies to the garbage collector. Taking
// the admit lock once waits for a Publish that is enqueueing; every later one sees the failure and
// enqueues nothing.
func (l *lane) discard() {
	l.r.admit.Lock() // a barrier, not a critical section
	l.r.admit.Unlock()
	release := func(p *publishing) { l.r.bytes.release(p.size); p.size, p.msg = 0, amqp.Publishing{} }
	drop := func(e *held) { l.r.bytes.release(e.size); e.size, e.ev = 0, cdc.Event{} }
	for {
		select {
		case p := <-l.queued:
			release(p)
		case p := <-l.sent:
			release(p)
		default:
			l.holds.discard(drop)
			return
		}
	}
}

// publishLoop writes the queued publishings with mandatory set, in the order they were queued, until the
// Router fails. While
// more are waiting behind the one it writes, it corks the connection, so that a burst goes out in few
// socket writes; it uncorks as soon as none is waiting, so a lone event is written at once. A write that
// fails (the channel or the connection is closed or lost) fails the Router; the message body is dropped
// as soon as it is written.
func (l *lane) publishLoop() {
	corked := false
	defer func() {
		if corked {
			_ = l.r.sock.uncork() // the Router has failed: what is left is never confirmed
		}
	}()
	for {
		p := l.waiting()
		if p == nil {
			if corked {
				corked = false
				if err := l.r.sock.uncork(); err != nil {
					select { // as in write: let the connection's watcher report the broker's reason first
					case <-l.r.failed:
					case <-time.After(time.Second):
						l.r.fail(fmt.Errorf("lane %d: write to RabbitMQ: %w", l.id, err), l.id, "")
					}
					return
				}
			}
			select {
			case <-l.r.failed:
				return
			case p = <-l.queued:
			}
		}
		if !corked && len(l.queued) > 0 {
			l.r.sock.cork()
			corked = true
		}
		if !l.write(p) {
			return
		}
	}
}

// waiting returns a queued publishing without waiting; nil if none is.
func (l *lane) waiting() *publishing {
	select {
	case p := <-l.queued:
		return p
	default:
		return nil
	}
}

// letThrough builds the publishing of a held event that is let through. Its message was not kept while
// it was held; build gives the same message again (it passed the same checks in Publish), so an error
// here is a defect, never a silent loss: it fails the Router, and letThrough returns nil.
func (l *lane) letThrough(e *held) *publishing {
	key, msg, _, err := l.r.build(e.ev)
	if err != nil {
		l.r.bytes.release(e.size)
		l.r.fail(fmt.Errorf("lane %d: rebuild held event %s: %w", l.id, e.ev.ID, err), l.id, e.ev.ID)
		return nil
	}
	return &publishing{eventID: e.ev.ID, exchange: e.exchange, key: key, agg: e.agg, msg: msg, size: e.size, done: e.done}
}

// write publishes p and hands it to confirmLoop; it reports whether the lane goes on.
func (l *lane) write(p *publishing) bool {
	if l.r.Err() != nil {
		l.r.bytes.release(p.size)
		return false
	}
	if !l.fenced(p) { // the router may have lost its slot (fence.go)
		return false
	}
	dc, err := l.ch.PublishWithDeferredConfirm(p.exchange, p.key, true, false, p.msg)
	p.msg = amqp.Publishing{}
	if err != nil {
		l.r.bytes.release(p.size)
		// A failed write means the channel or the connection is gone: let confirmLoop or the
		// connection's watcher report the broker's reason for the close.
		select {
		case <-l.r.failed:
			return false
		case <-time.After(time.Second):
		}
		l.r.fail(fmt.Errorf("lane %d: publish event %s: %w", l.id, p.eventID, err), l.id, p.eventID)
		return false
	}
	p.sent = time.Now()
	p.confirm, p.deadline = dc, p.sent.Add(l.r.cfg.ConfirmTimeout)
	l.sent <- p
	return true
}

// confirmLoop resolves the sent publishings in order until the Router fails or the channel closes.
func (l *lane) confirmLoop() {
	timer := &confirmTimer{t: time.NewTimer(time.Hour)}
	defer timer.t.Stop()
	for {
		select {
		case <-l.r.failed:
			return
		case e, ok := <-l.closes:
			var first *publishing
			select {
			case p := <-l.sent: // the oldest unresolved publishing of the lane
				first = p
				l.r.bytes.release(p.size)
				p.size = 0
			default:
			}
			l.closed(e, ok, first)
			return
		case p := <-l.sent:
			l.writing.Store(p)
			ok := l.resolve(p, timer)
			l.writing.Store(nil)
			if !ok {
				return
			}
		}
	}
}

// resolve waits for the confirmation of p and acts on it: done for a positive confirm of a message that
// was not returned, failure otherwise. It reports whether the lane goes on. Either way p's bytes go back
// to the budget.
func (l *lane) resolve(p *publishing, timer *confirmTimer) bool {
	defer func() { l.r.bytes.release(p.size) }() // p.size is zeroed once released
	if !timer.armed {
		timer.t.Reset(time.Until(p.deadline))
		timer.armed = true
	}
	for confirmed := false; !confirmed; {
		select {
		case <-p.confirm.Done():
			now := time.Now()
			rtt := now.Sub(p.sent)
			l.r.cfg.Metrics.confirmed(rtt)
			l.window.confirmed(now, rtt)
			confirmed = true
		case <-l.r.failed:
			return false
		case <-timer.t.C:
			timer.armed = false
			if wait := time.Until(p.deadline); wait > 0 { // armed for an earlier publishing's deadline
				timer.t.Reset(wait)
				timer.armed = true
				continue
			}
			l.r.fail(fmt.Errorf("lane %d: event %s: %w after %s", l.id, p.eventID, ErrConfirmTimeout, l.r.cfg.ConfirmTimeout), l.id, p.eventID)
			return false
		}
	}
	l.drainReturns() // a return precedes the ack of its message on amqp091's reader goroutine
	if ret, ok := l.takeReturn(p.eventID); ok {
		l.r.cfg.Metrics.returned()
		l.remember(p.agg)
		l.r.fail(&PublishError{EventID: p.eventID, Reason: fmt.Sprintf(
			"returned by the broker (%d %s): nothing is bound to routing key %q on exchange %q and it has no alternate exchange",
			ret.ReplyCode, ret.ReplyText, ret.RoutingKey, ret.Exchange), OneMessage: p.exchange != l.r.cfg.Exchange,
			Settles: true}, l.id, p.eventID)
		return false
	}
	if !p.confirm.Acked() {
		if l.ch.IsClosed() {
			e, ok := l.closeError()
			l.closed(e, ok, p)
			return false
		}
		l.r.cfg.Metrics.nacked()
		l.remember(p.agg)
		l.r.fail(&PublishError{EventID: p.eventID, Reason: fmt.Sprintf("nacked by the broker (a queue bound to exchange %q refused it: "+
			"x-max-length or x-max-length-bytes with x-overflow=reject-publish, a full queue or a message larger than the queue allows, "+
			"or an internal error)", p.exchange), OneMessage: true, Settles: true}, l.id, p.eventID)
		return false
	}
	l.r.deliver(p)
	l.r.bytes.release(p.size) // before track, so that the bytes are back once Drain returns
	p.size = 0
	l.r.refused.clear(p.agg) // before next: the aggregate has its AggregateWindow again
	if n := l.holds.next(p.agg); n != nil {
		q := l.letThrough(n)
		if q == nil {
			return false
		}
		l.queued <- q // q takes p's slot: queued has room, and the events of its aggregate let through before it are ahead
	} else {
		l.window.release()
	}
	l.r.track(-1)
	return true
}

// confirmTimer is confirmLoop's one timer for ConfirmTimeout. The deadlines of a lane's sent publishings
// never go back (each is ConfirmTimeout after its write, in write order), so a timer armed for an earlier
// publishing's deadline fires no later than the current one's: it is set again only when it fires, not once
// per confirm (a clock read and a timer update per event).
type confirmTimer struct {
	t     *time.Timer
	armed bool // t runs, for the deadline of this or an earlier publishing
}

// drainReturns moves every buffered return into returned without blocking. amqp091 closes the returns
// channel with the channel; it is then set to nil so the drain never spins on it.
func (l *lane) drainReturns() {
	for l.returns != nil {
		select {
		case ret, ok := <-l.returns:
			if !ok {
				l.returns = nil
				return
			}
			ret.Body = nil
			l.returned[ret.MessageId] = ret
		default:
			return
		}
	}
}

// takeReturn reports whether a return for id is waiting, and consumes it.
func (l *lane) takeReturn(id string) (amqp.Return, bool) {
	ret, ok := l.returned[id]
	delete(l.returned, id)
	return ret, ok
}

// closeError waits briefly for the close reason of the channel, which amqp091 sends before it resolves
// the pending confirmations.
func (l *lane) closeError() (*amqp.Error, bool) {
	select {
	case e, ok := <-l.closes:
		return e, ok
	case <-l.r.failed:
		return nil, false
	case <-time.After(time.Second):
		return nil, false
	}
}

// closed fails the Router with a *ClosedError for a closed channel; oldest is the oldest unresolved
// publishing of the lane, when known. A close without error is the Router's own Close, which failed it
// already. A close that names the exchange whose publish it refused (closedError's Refused, Internal,
// Missing) is attributed to the event whose publish it refused (refusedPublish).
func (l *lane) closed(e *amqp.Error, ok bool, oldest *publishing) {
	if !ok {
		e = nil
	}
	var first string
	if oldest != nil {
		first = oldest.eventID
	}
	ce := closedError(e, l.r.conn.IsClosed(), l.id, first, l.r.cfg.Exchange)
	if x, key := ce.refusedExchange(); x != "" {
		if p := l.refusedPublish(x, key, oldest); p != nil {
			ce.EventID, ce.Attributed = p.eventID, true
			l.remember(p.agg)
		}
	}
	l.r.fail(ce, l.id, ce.EventID)
}
