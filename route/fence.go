package route

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Fence says whether the Router may write to RabbitMQ now. An interface rather than a function, so that a
// Config stays comparable.
type Fence interface {
	// Check is asked right before each basic.publish and before gathered writes go out: nil lets them go.
	Check() error
	// Broken is asked before every write to the broker's socket, whatever it carries (a publish, a
	// heartbeat, a close): nil unless the fence broke (the process was paused), after which nothing of the
	// connection is written. It catches a pause that falls after a lane's Check, before its write.
	Broken() error
}

// Config.Fence is asked before anything of an event is written to RabbitMQ: by the lane right before each
// basic.publish, and by the corked connection before it writes the messages it gathered (corkConn), so that
// a message gathered before the process was paused is not written after it either. A Fence that says no
// fails the Router with its error, and the message it was asked for, and every message not written yet,
// never reaches the broker. The stream decides what the Fence says (replication.Fence: the router still
// holds its PostgreSQL slot); route only asks.

// fenced reports whether the lane may write p now; when Config.Fence says no, it fails the Router with
// Fence's error (the messages the lane gathered are dropped with it, corkConn.flushLocked) and releases p.
func (l *lane) fenced(p *publishing) bool {
	if l.r.cfg.Fence == nil {
		return true
	}
	err := l.r.cfg.Fence.Check()
	if err == nil {
		return true
	}
	l.r.bytes.release(p.size)
	p.size, p.msg = 0, amqp.Publishing{}
	l.r.fail(fmt.Errorf("lane %d: event %s not written to RabbitMQ: %w", l.id, p.eventID, err), l.id, p.eventID)
	return false
}

// fenceWrite is corkConn's check before any write: nil lets the write go; otherwise the gathered bytes are
// dropped and every later write of the connection fails with fence's error.
func (c *corkConn) fenceWrite() error {
	if c.fence == nil {
		return nil
	}
	if err := c.fence.Broken(); err != nil {
		c.buf = c.buf[:0]
		c.err = err
		return err
	}
	return nil
}

// fenceGathered is corkConn's check before it writes what it gathered: nil lets the write go; otherwise the
// gathered bytes are dropped and every later write of the connection fails with fence's error.
func (c *corkConn) fenceGathered() error {
	if c.fence == nil {
		return nil
	}
	if err := c.fence.Check(); err != nil {
		c.buf = c.buf[:0]
		c.err = err
		return err
	}
	return nil
}
