package route

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/route/rabbitmq"
)

// handshakeTimeout bounds the AMQP handshake, tcpConnectTimeout the TCP connect to one address: an address
// that does not answer (a stopped host, a dropped SYN) must not keep the router from the next one.
const (
	handshakeTimeout  = 30 * time.Second
	tcpConnectTimeout = 10 * time.Second
)

// socket keeps the TCP connection under the AMQP connection, so that Close and a cancelled Dial can cut
// it when the AMQP close handshake cannot complete (stalled broker, full socket buffers).
type socket struct {
	mu    sync.Mutex
	conn  *corkConn
	fence Fence // Config.Fence, for the corked writes (corkConn)
}

// dial opens the TCP connection within ctx, with a deadline for the handshake that amqp091 clears once
// the connection is open.
func (s *socket) dial(ctx context.Context) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: tcpConnectTimeout}
		c, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		// ctx itself is enforced by closing the socket (connect), so that ctx.Err() explains the failure.
		if err := c.SetDeadline(time.Now().Add(handshakeTimeout)); err != nil {
			c.Close()
			return nil, err
		}
		cc := &corkConn{Conn: c, fence: s.fence}
		s.mu.Lock()
		s.conn = cc
		s.mu.Unlock()
		return cc, nil
	}
}

// cork and uncork bracket a lane's batch of writes (corkConn).
func (s *socket) cork() { s.current().cork() }

func (s *socket) uncork() error { return s.current().uncork() }

func (s *socket) current() *corkConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn
}

func (s *socket) close() error {
	s.mu.Lock()
	c := s.conn
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Close()
}

// connect opens the Router's own AMQP connection to addr. Automatic recovery stays off (Config.Recovery nil).
func connect(ctx context.Context, cfg Config, addr rabbitmq.Address) (*amqp.Connection, *socket, error) {
	sock := &socket{fence: cfg.Fence}
	props := amqp.NewConnectionProperties()
	props.SetClientConnectionName(cfg.ConnectionName)
	stop := context.AfterFunc(ctx, func() { sock.close() })
	conn, err := amqp.DialConfig(addr.URL, amqp.Config{Properties: props, Dial: sock.dial(ctx)})
	stop()
	if err != nil {
		_ = sock.close()
		if ctx.Err() != nil {
			return nil, nil, fmt.Errorf("connect to RabbitMQ: %w", ctx.Err())
		}
		return nil, nil, rabbitmq.DialError(addr.URI, err)
	}
	return conn, sock, nil
}

// closeConnection closes conn with a bounded close handshake, then its socket in any case.
func closeConnection(conn *amqp.Connection, sock *socket) error {
	errc := make(chan error, 1)
	go func() { errc <- conn.CloseDeadline(time.Now().Add(closeHandshake)) }()
	var err error
	select {
	case err = <-errc:
	case <-time.After(closeHandshake + time.Second):
	}
	_ = sock.close()
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return fmt.Errorf("close RabbitMQ connection: %v", err)
	}
	return nil
}

// watch starts the goroutine that drains the connection's notifications: connection.blocked and
// unblocked are logged (publishing stalls on its own: the broker stops reading), and a connection that
// closes with an error fails the Router. It ends when amqp091 closes the listeners with the connection.
func (r *Router) watch() {
	closes := r.conn.NotifyClose(make(chan *amqp.Error, 1))
	blocked := r.conn.NotifyBlocked(make(chan amqp.Blocking, 8))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for closes != nil || blocked != nil {
			select {
			case e, ok := <-closes:
				if ok && e != nil {
					r.fail(closedError(e, true, -1, "", r.cfg.Exchange), -1, "")
				}
				closes = nil
			case b, ok := <-blocked:
				if !ok {
					blocked = nil
					continue
				}
				r.blocked.Store(b.Active)
				if b.Active {
					r.block.Store(&Blocking{Reason: b.Reason, Since: time.Now()})
				} else {
					r.block.Store(nil)
				}
				if b.Active {
					r.log.Warn("RabbitMQ blocked the connection", slog.String("exchange", r.cfg.Exchange), slog.String("reason", b.Reason))
				} else {
					r.log.Info("RabbitMQ unblocked the connection", slog.String("exchange", r.cfg.Exchange))
				}
			}
		}
	}()
}
