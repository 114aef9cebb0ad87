package main

// The far-broker mode's network: a TCP proxy in front of RabbitMQ that delays every chunk of bytes by a
// fixed one-way delay in both directions, as a broker a few milliseconds away would. Unlike
// internal/testenv's Proxy (which stalls and cuts), it keeps the link's throughput: each chunk is written
// at its arrival time plus the delay, however many chunks are on their way, as bytes on a long network
// path are; it never waits for one chunk to be delivered before it reads the next (stop-and-wait would
// cap the rate at one chunk per round trip, a different and much slower network).

import (
	"io"
	"net"
	"net/url"
	"sync"
	"time"
)

// delayProxy listens on 127.0.0.1 and forwards each connection to target, delaying both directions.
type delayProxy struct {
	addr   string // host:port to dial instead of target
	target string
	delay  time.Duration // one way
	ln     net.Listener

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newDelayProxy(target string, delay time.Duration) (*delayProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{addr: ln.Addr().String(), target: target, delay: delay, ln: ln, conns: map[net.Conn]struct{}{}}
	go p.accept()
	return p, nil
}

func (p *delayProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		for _, conn := range []net.Conn{c, s} {
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetNoDelay(true)
			}
		}
		p.mu.Lock()
		p.conns[c], p.conns[s] = struct{}{}, struct{}{}
		p.mu.Unlock()
		go p.relay(s, c)
		go p.relay(c, s)
	}
}

// close stops accepting and closes every connection made through the proxy.
func (p *delayProxy) close() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]struct{}{}
}

// chunk is what one read returned, and when it is due on the other side.
type chunk struct {
	due time.Time
	b   []byte
}

// relay copies src to dst, each chunk delayed by p.delay from its arrival. The reader stamps and queues the
// chunks; forward writes them when due. When either side ends, both connections are closed.
func (p *delayProxy) relay(dst, src net.Conn) {
	q := make(chan chunk, 4096) // up to 4,096 reads in flight per direction; a fuller queue holds the reader back as TCP would
	go func() {
		defer close(q)
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				q <- chunk{due: time.Now().Add(p.delay), b: append([]byte(nil), buf[:n]...)}
			}
			if err != nil {
				return
			}
		}
	}()
	forward(dst, q)
	dst.Close()
	src.Close()
	for range q { // let the reader finish (src is closed)
	}
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// forward writes the chunks of q to dst in order, none before it is due: it sleeps until the first one
// is due, then writes it together with every later chunk already due (one writev), and so on. A chunk's
// wait never adds to the next one's: each is written at its own due time, or as soon after as the chunks
// before it are written. It returns when q is closed and drained, or on a write error.
func forward(dst io.Writer, q <-chan chunk) error {
	var next chunk
	for {
		if next.b == nil {
			c, ok := <-q
			if !ok {
				return nil
			}
			next = c
		}
		if w := time.Until(next.due); w > 0 {
			time.Sleep(w)
		}
		bufs := net.Buffers{next.b}
		next = chunk{}
		closed := false
	gather:
		for {
			select {
			case c, ok := <-q:
				if !ok {
					closed = true
					break gather
				}
				if time.Until(c.due) > 0 {
					next = c
					break gather
				}
				bufs = append(bufs, c.b)
			default:
				break gather
			}
		}
		if _, err := bufs.WriteTo(dst); err != nil {
			return err
		}
		if closed {
			return nil
		}
	}
}

// url returns amqpURL with its host and port replaced by the proxy's.
func (p *delayProxy) url(amqpURL string) (string, error) {
	u, err := url.Parse(amqpURL)
	if err != nil {
		return "", err
	}
	u.Host = p.addr
	return u.String(), nil
}

// brokerAddr is the host:port of amqpURL (port 5672 when it names none).
func brokerAddr(amqpURL string) (string, error) {
	u, err := url.Parse(amqpURL)
	if err != nil {
		return "", err
	}
	port := u.Port()
	if port == "" {
		port = "5672"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}
