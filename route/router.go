package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/route/message"
	"github.com/cdc-router/cdc-router/route/rabbitmq"
)

// Close bounds: the connection.close handshake gets closeHandshake, then the socket is closed; the
// goroutines get closeWait to finish.
const (
	closeHandshake = 2 * time.Second
	closeWait      = 3 * time.Second
)

// Router publishes events on Lanes confirm-mode channels of its own connection. Its methods are safe for
// concurrent use. The events of one aggregate are written in the order of the Publish calls that return,
// each only once the one before it is confirmed; events of other aggregates of the lane go on meanwhile.
type Router struct {
	cfg   Config
	log   *slog.Logger
	conn  *amqp.Connection
	sock  *socket
	lanes []*lane
	wg    sync.WaitGroup

	limiter *limiter // the lanes' adaptive in-flight limit; nil with a fixed Config.Window

	mu     sync.RWMutex // write-held to fail; read-held around every done call
	err    error        // set once, before failed is closed
	failed chan struct{}

	idleMu   sync.Mutex
	inflight int
	idle     chan struct{} // made by a Drain that waits, closed (and dropped) when inflight reaches 0

	frameMax int          // the connection's negotiated frame_max (RabbitMQ's default when it set none)
	bytes    *budget      // Config.MaxInflightBytes
	held     *budget      // Config.MaxHeld: events held behind their aggregate, across the lanes
	admit    sync.RWMutex // read-held by Publish while it enqueues; a lane write-locks it once to stop enqueues after failure

	blocked atomic.Bool              // RabbitMQ blocks the connection (connection.blocked), for Metrics
	block   atomic.Pointer[Blocking] // the reason and start of the current block, nil when none

	exchanges exchanges // the exchanges of amqp.topic.target=exchange found to exist
	refused   *refusals // aggregates refused and not confirmed since: the Dialer's, across its Routers; nil for Dial's

	unchecked bool // test hook: publish what the checks would refuse, to provoke the broker's own refusal

	closeOnce sync.Once
	closeErr  error
}

// Dial connects to RabbitMQ with cfg (defaults applied), declares the topology, opens cfg.Lanes channels
// in confirm mode and starts their goroutines. ctx bounds the connection and the declarations only.
// Errors a user can cause (URL, refused connection, login, permissions, an exchange that exists with
// other arguments, a connection limit) are one sentence naming the fix, matching ErrInvalidURL,
// ErrUnreachable, ErrAccessRefused, ErrConnectionLimit or ErrExchangeMismatch. A nil logger discards the log.
// With several addresses in cfg.URL they are tried in order (see Dialer).
func Dial(ctx context.Context, cfg Config, logger *slog.Logger) (*Router, error) {
	r, _, err := dial(ctx, cfg, logger, 0, &sync.Map{}, nil)
	return r, err
}

// dial is Dial from the address at index start; it returns the index of the address it connected to,
// -1 if none. logged is the set of exchanges already logged as found (exchanges.logged), refused the
// aggregates refused by earlier Routers (nil: none remembered).
func dial(ctx context.Context, cfg Config, logger *slog.Logger, start int, logged *sync.Map, refused *refusals) (*Router, int, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cfg, addrs, conn, sock, used, err := reach(ctx, cfg, logger, start)
	if err != nil {
		return nil, used, err
	}
	uri := addrs[used].URI
	stop := context.AfterFunc(ctx, func() { sock.close() })
	r, err := open(cfg, logger, uri, conn, sock, logged, refused)
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if r != nil {
			r.Close()
		} else {
			_ = closeConnection(conn, sock)
		}
		if ctx.Err() != nil {
			return nil, used, fmt.Errorf("connect to RabbitMQ: %w", ctx.Err())
		}
		return nil, used, err
	}
	logger.Info("connected to RabbitMQ", slog.String("address", addrs[used].HostPort()), slog.String("exchange", cfg.Exchange),
		slog.Int("lanes", cfg.Lanes), slog.Int("window", cfg.Window))
	return r, used, nil
}

// reach validates cfg, applies its defaults and connects to one of its addresses from index start: the
// first steps of a Dial and of a Dialer's Probe. used is the address connected to, -1 before any was tried.
func reach(ctx context.Context, cfg Config, logger *slog.Logger, start int) (Config, []rabbitmq.Address, *amqp.Connection,
	*socket, int, error) {
	if err := cfg.Validate(); err != nil {
		return cfg, nil, nil, nil, -1, err
	}
	cfg = cfg.withDefaults()
	addrs, err := parseAddresses(cfg.URL)
	if err != nil {
		return cfg, nil, nil, nil, -1, err
	}
	conn, sock, used, err := connectAny(ctx, cfg, logger, addrs, start)
	return cfg, addrs, conn, sock, used, err
}

// open declares the topology and starts the lanes on an established connection.
func open(cfg Config, logger *slog.Logger, uri amqp.URI, conn *amqp.Connection, sock *socket, logged *sync.Map, refused *refusals) (*Router, error) {
	if err := declare(conn, cfg, uri); err != nil {
		return nil, err
	}
	r := &Router{cfg: cfg, log: logger, conn: conn, sock: sock, failed: make(chan struct{}),
		frameMax: conn.Config.FrameSize, bytes: newBudget(cfg.MaxInflightBytes), held: newBudget(cfg.MaxHeld),
		exchanges: exchanges{logged: logged}, refused: refused}
	if r.frameMax <= 0 {
		r.frameMax = message.DefaultFrameMax
	}
	if cfg.AdaptiveWindow {
		r.limiter = newLimiter(cfg.Window)
	}
	for i := range cfg.Lanes {
		l, err := openLane(r, i)
		if err != nil {
			return r, fmt.Errorf("open lane %d: %w", i, err)
		}
		r.lanes = append(r.lanes, l)
	}
	cfg.Metrics.opened(r) // once the lanes are in place: Metrics.Unconfirmed reads them at scrape time
	r.watch()
	for _, l := range r.lanes {
		r.wg.Add(1)
		go l.run()
	}
	r.wg.Add(1)
	go r.watchUnconfirmed(UnconfirmedBound, unconfirmedTick)
	return r, nil
}

// Publish hands ev to its lane (chosen by aggregate_type and aggregate_id) and returns without waiting
// for the confirm. While AggregateWindow earlier events of the same aggregate are unconfirmed (one by
// default), ev is held aside and written once one of them is confirmed (never if it is refused). It
// blocks while that lane's window (written events) is full, while the event's bytes do not fit
// MaxInflightBytes next to those of the events in flight, or while it would be held and MaxHeld events
// are held already; if ctx ends first it returns ctx.Err() and ev is not enqueued. It returns the Router's error once the Router has failed. An event that can never become
// a message the broker accepts (it fails Check, or its properties and headers do not fit the connection's
// frame_max) is refused with an error wrapping ErrInvalidEvent (cdc.ErrUnpublishable), and the Router
// goes on. done, which may be nil, is called once, from a route goroutine, when the broker confirmed the
// message positively and did not return it; it is never called after the Router has failed. done must
// return quickly and must not call Close.
func (r *Router) Publish(ctx context.Context, ev cdc.Event, done func()) error {
	key, msg, header, err := r.build(ev)
	if err != nil {
		return err
	}
	if err := r.Err(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	exchange, err := r.exchange(ev)
	if err != nil {
		return err
	}
	agg := aggregateHash(ev)
	l := r.lanes[agg%uint64(len(r.lanes))]
	if err := l.window.acquire(ctx, r.failed); err != nil {
		if errors.Is(err, errFailed) {
			return r.Err()
		}
		return err
	}
	size := header + len(msg.Body)
	if err := r.bytes.acquire(ctx, r.failed, size); err != nil {
		l.window.release()
		if errors.Is(err, errFailed) {
			return r.Err()
		}
		return err
	}
	r.admit.RLock()
	defer r.admit.RUnlock()
	if err := r.Err(); err != nil { // the lane may already have discarded its queue
		r.bytes.release(size)
		l.window.release()
		return err
	}
	e := held{ev: ev, exchange: exchange, agg: agg, size: size, done: done}
	r.track(1) // before admit: a held event can be written and confirmed before admit returns
	verdict, err := l.holds.admitOrWait(&e, func(freed <-chan struct{}) error {
		select {
		case <-freed:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		case <-r.failed:
			return r.Err()
		}
	})
	switch {
	case err != nil: // nothing was admitted
		r.bytes.release(size)
		l.window.release()
		r.track(-1)
		return err
	case verdict == letThrough:
		l.queued <- &publishing{eventID: ev.ID, exchange: exchange, key: key, agg: agg, msg: msg, size: size, done: done} // a held slot guarantees room
	default: // held: it waits aside, without a slot; it takes its predecessor's when that one is confirmed
		l.window.release()
	}
	return nil
}

// WindowLimit is the sum of the lanes' in-flight limits now (Config.Window times the lanes when fixed).
func (r *Router) WindowLimit() int {
	n := 0
	for _, l := range r.lanes {
		n += l.window.limit()
	}
	return n
}

// build maps ev to its message after the static checks (Check) and the frame check against the
// connection's frame_max; it returns the size of the content header frame as well.
func (r *Router) build(ev cdc.Event) (string, amqp.Publishing, int, error) {
	if r.unchecked {
		key, msg := message.Unchecked(ev)
		n, _, _ := message.ContentHeaderSize(msg)
		return key, msg, n + message.FrameOverhead, nil
	}
	key, msg, err := message.Build(ev)
	if err != nil {
		return "", amqp.Publishing{}, 0, err
	}
	fix := message.NativeFrameFix
	if ev.Mapped != nil {
		fix = message.MappedFrameFix
	}
	n, err := message.CheckFrameFix(msg, r.frameMax, fix)
	if err != nil {
		return "", amqp.Publishing{}, 0, err
	}
	return key, msg, n, nil
}

// Failed is closed when the Router has failed or was closed; Err then says why.
func (r *Router) Failed() <-chan struct{} { return r.failed }

// Err is nil while the Router works. After a failure it is a *PublishError (nack, return), a *ClosedError
// (a channel or the connection closed by the broker, or the connection lost; it matches ErrBrokerClosed
// and says with PerMessage whether one message can have caused it), an error matching ErrConfirmTimeout,
// or the error of a publish that could not be written; after Close of a working Router it is ErrClosed.
func (r *Router) Err() error {
	select {
	case <-r.failed:
		return r.err
	default:
		return nil
	}
}

// Drain waits until every published event has been resolved positively (its done was called). It returns
// the Router's error if the Router fails first, and ctx.Err() if ctx ends first.
func (r *Router) Drain(ctx context.Context) error {
	r.idleMu.Lock()
	if r.inflight == 0 {
		r.idleMu.Unlock()
		return r.Err()
	}
	if r.idle == nil {
		r.idle = make(chan struct{})
	}
	idle := r.idle
	r.idleMu.Unlock()
	select {
	case <-idle:
		return r.Err()
	case <-r.failed:
		return r.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close fails the Router with ErrClosed (unless it failed before), closes the connection, which closes
// its channels, and stops the goroutines. It returns within a few seconds even when the broker or the
// network is stalled: the close handshake is bounded, then the socket is closed. Calling it again
// returns the first result.
func (r *Router) Close() error {
	r.closeOnce.Do(func() {
		r.fail(ErrClosed, -1, "")
		r.cfg.Metrics.closed(r)
		r.closeErr = closeConnection(r.conn, r.sock)
		done := make(chan struct{})
		go func() { r.wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(closeWait):
			r.log.Warn("route goroutines still running after close", slog.String("exchange", r.cfg.Exchange))
		}
	})
	return r.closeErr
}

// fail puts the Router into the failed state once; later calls are ignored. lane is -1 when the failure
// is not a lane's.
func (r *Router) fail(err error, lane int, eventID string) {
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return
	}
	r.err = err
	close(r.failed)
	r.mu.Unlock()
	if errors.Is(err, ErrClosed) {
		r.log.Info("router closed", slog.String("exchange", r.cfg.Exchange))
		return
	}
	attrs := []any{slog.String("exchange", r.cfg.Exchange), slog.String("reason", err.Error())}
	if lane >= 0 {
		attrs = append(attrs, slog.Int("lane", lane))
	}
	if eventID != "" {
		attrs = append(attrs, slog.String("event_id", eventID))
	}
	// WARN: the stream that owns this Router restarts from the acknowledged position and decides, with what
	// it knows (a refusal, a lost slot, a stream stuck past its bound), what needs a human and logs that.
	msg := "router failed; the stream restarts from the acknowledged position"
	if ce := (*ClosedError)(nil); errors.As(err, &ce) && ce.Permanent() {
		msg = "router failed; the stream stops at the acknowledged position until the permission is granted"
	}
	r.log.Warn(msg, attrs...)
}

// deliver calls done unless the Router has failed; fail waits for a running done.
func (r *Router) deliver(p *publishing) {
	r.mu.RLock()
	if r.err == nil && p.done != nil {
		p.done()
	}
	r.mu.RUnlock()
}

// track adds n to the number of unresolved events and wakes the Drains that wait once none is left. The
// channel they wait on is made only when one waits, not each time the count leaves zero (at a trickle, each
// event alone).
func (r *Router) track(n int) {
	r.idleMu.Lock()
	defer r.idleMu.Unlock()
	r.inflight += n
	if r.inflight == 0 && r.idle != nil {
		close(r.idle)
		r.idle = nil
	}
}
