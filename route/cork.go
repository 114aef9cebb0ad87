package route

import (
	"net"
	"sync"
)

// corkLimit is the most a corked connection buffers before it writes anyway: a few dozen messages of the
// usual size, so one write(2) carries many, and what others write meanwhile (a heartbeat, another lane's
// frames, an RPC) waits at most that long.
const corkLimit = 64 << 10

// corkConn is the TCP connection under amqp091 (and under TLS, with amqps). amqp091 flushes its buffer
// after every publish, so each message is one write(2); while a lane has more messages queued behind the
// one it writes, it corks the connection, and the writes are gathered here until every lane that corked
// it has uncorked (its queue ran empty) or corkLimit bytes are buffered. A single event, with nothing
// behind it, is written at once, as before. A write error of a gathered write is returned by the Write or
// uncork that makes it; the messages it carried are unconfirmed, so the Router fails and the stream
// restarts from its acknowledged position, as for any lost write.
type corkConn struct {
	net.Conn

	mu    sync.Mutex
	corks int    // lanes writing a batch now
	buf   []byte // gathered writes, at most corkLimit
	err   error  // the first write error: every later write returns it
	fence Fence  // Config.Fence, asked before the gathered writes go out (fenceGathered)
}

// Write gathers b while the connection is corked and b fits, and writes through otherwise (what was
// gathered first).
func (c *corkConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.fenceWrite(); err != nil {
		return 0, err
	}
	if c.corks > 0 && len(c.buf)+len(b) <= corkLimit {
		if c.err != nil {
			return 0, c.err
		}
		c.buf = append(c.buf, b...)
		return len(b), nil
	}
	if err := c.flushLocked(); err != nil {
		return 0, err
	}
	if c.corks > 0 && len(b) <= corkLimit {
		c.buf = append(c.buf, b...)
		return len(b), nil
	}
	n, err := c.Conn.Write(b)
	if err != nil {
		c.err = err
	}
	return n, err
}

// cork starts a batch: writes are gathered until the matching uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corks++
	c.mu.Unlock()
}

// uncork ends a batch; the last one writes what was gathered.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corks--; c.corks > 0 {
		return c.err
	}
	return c.flushLocked()
}

func (c *corkConn) flushLocked() error {
	if c.err != nil {
		return c.err
	}
	if len(c.buf) == 0 {
		return nil
	}
	if err := c.fenceGathered(); err != nil {
		return err
	}
	_, err := c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
	if err != nil {
		c.err = err
	}
	return err
}
