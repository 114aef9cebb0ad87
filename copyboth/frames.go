package copyboth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"

	"github.com/jackc/pglogrepl"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// keepFrameBuffer is the largest frame buffer kept for the next message; a larger one is dropped after use.
const keepFrameBuffer = 1 << 20

// XLogData header: 'w', WAL start, server WAL end, server time; then a pgoutput Message ('M'): flags, LSN,
// prefix (NUL-terminated), content length, content.
const (
	xlogHeader    = 1 + 8 + 8 + 8
	messageHeader = 1 + 1 + 8 // 'M', flags, LSN; the prefix follows
)

// Frames reads the CopyBoth stream of one replication session from its Wire. A logical decoding message
// ('M' in an XLogData) is judged from its header before its content is read: one with another prefix than
// the router's, and one with the router's prefix whose content is over limit, is discarded while it is read
// (at most wireBuffer bytes of it held at once) and never buffered whole. Every other message is read whole
// and returned as it came. A read that ends at the connection's read deadline keeps what was read: the next
// call goes on with the same message.
type Frames struct {
	w      *Wire
	prefix []byte // the router's message prefix and its NUL; nil: every message is discarded (none is wanted)
	limit  int64  // the largest message content read

	// The message being read.
	body   int    // its body length; -1 between messages
	typ    byte   // its type byte
	judged bool   // whether its header was looked at
	skip   int64  // bytes of it still to discard
	out    Frame  // what Next returns for it once discarded
	buf    []byte // its body read so far, when it is read whole

	// Moved says that a call ending at the read deadline consumed part of a message: the server is
	// speaking, only slowly (a large message over a slow link), which is not silence.
	Moved bool
}

// Frame is one message of the CopyBoth stream. Data is the body of a message read whole (for CopyData its
// data), valid until the next call; Skipped is set instead for a logical decoding message that was
// discarded, with its XLogData header and, for one with the router's prefix (over the limit), its header.
type Frame struct {
	Type    byte
	Data    []byte
	Skipped bool
	XLog    pglogrepl.XLogData // WALStart and ServerWALEnd of a skipped message; no WALData
	Over    *Oversized
}

// Oversized is the header of a message with the router's prefix whose content was discarded unread.
type Oversized struct {
	Transactional bool
	LSN           cdc.LSN // the message's own LSN
	Size          int64   // its content length
}

// NewFrames reads the stream from w; prefix is the router's message prefix ("": none is wanted) and limit
// the largest message content it reads.
func NewFrames(w *Wire, prefix string, limit int) *Frames {
	f := &Frames{w: w, limit: int64(limit), body: -1}
	if prefix != "" {
		f.prefix = append([]byte(prefix), 0)
	}
	return f
}

// Next returns the next message of the stream.
func (f *Frames) Next() (Frame, error) {
	src := f.w.src
	if f.body < 0 {
		h, err := src.Peek(5)
		if err != nil {
			return Frame{}, eofUnexpected(err)
		}
		typ, n := h[0], int(int32(binary.BigEndian.Uint32(h[1:])))
		if n < 4 {
			return Frame{}, fmt.Errorf("invalid message length %d on the replication connection", n)
		}
		src.Discard(5)
		f.typ, f.body, f.judged, f.skip, f.out = typ, n-4, false, 0, Frame{}
		if cap(f.buf) > keepFrameBuffer {
			f.buf = nil
		}
		f.buf = f.buf[:0]
	}
	if !f.judged {
		if err := f.judge(); err != nil {
			return Frame{}, err
		}
		f.judged = true
	}
	if f.out.Skipped {
		for f.skip > 0 {
			n, err := src.Discard(int(min(f.skip, 1<<30)))
			f.skip -= int64(n)
			f.Moved = f.Moved || n > 0
			if err != nil {
				return Frame{}, eofUnexpected(err)
			}
		}
		f.body = -1
		return f.out, nil
	}
	if f.body <= src.Size() { // in the read buffer: no copy
		b, err := src.Peek(f.body)
		if err != nil {
			return Frame{}, eofUnexpected(err)
		}
		src.Discard(f.body)
		f.body = -1
		return Frame{Type: f.typ, Data: b}, nil
	}
	if cap(f.buf) < f.body {
		f.buf = append(make([]byte, 0, f.body), f.buf...)
	}
	n, err := io.ReadFull(src, f.buf[len(f.buf):f.body])
	f.buf = f.buf[:len(f.buf)+n]
	f.Moved = f.Moved || n > 0
	if err != nil {
		return Frame{}, eofUnexpected(err)
	}
	f.body = -1
	return Frame{Type: f.typ, Data: f.buf}, nil
}

// Ready reports whether the next message is in the read buffer whole, so that Next returns it without
// reading the connection: it neither waits nor needs a read deadline.
func (f *Frames) Ready() bool {
	src := f.w.src
	if f.body >= 0 || src.Buffered() < 5 {
		return false // within a message, or its header not read yet: Next may read
	}
	h, _ := src.Peek(5) // buffered: no read
	n := int(int32(binary.BigEndian.Uint32(h[1:])))
	return n >= 4 && src.Buffered() >= 1+n
}

// judge looks at the header of a CopyData that holds a logical decoding message and decides whether it is
// discarded. A message too short to hold the router's prefix and a content length is read whole: the
// decoder judges it.
func (f *Frames) judge() error {
	need := xlogHeader + messageHeader + len(f.prefix) + 4
	if f.typ != 'd' || f.body < xlogHeader+1 || need > f.w.src.Size() {
		return nil
	}
	b, err := f.w.src.Peek(min(f.body, need))
	if err != nil {
		return eofUnexpected(err)
	}
	if b[0] != pglogrepl.XLogDataByteID || b[xlogHeader] != 'M' {
		return nil
	}
	skipped := Frame{Type: f.typ, Skipped: true, XLog: pglogrepl.XLogData{
		WALStart:     pglogrepl.LSN(binary.BigEndian.Uint64(b[1:])),
		ServerWALEnd: pglogrepl.LSN(binary.BigEndian.Uint64(b[9:]))}}
	if f.prefix == nil {
		f.out, f.skip = skipped, int64(f.body)
		return nil
	}
	if len(b) < need {
		return nil
	}
	m := b[xlogHeader:]
	if !bytes.Equal(m[messageHeader:messageHeader+len(f.prefix)], f.prefix) {
		f.out, f.skip = skipped, int64(f.body) // another prefix: never read
		return nil
	}
	size := int64(binary.BigEndian.Uint32(m[messageHeader+len(f.prefix):]))
	if size <= f.limit {
		return nil // read whole; the decoder checks the rest
	}
	if int64(need)+size != int64(f.body) {
		return fmt.Errorf("logical decoding message at %s claims %d bytes of content in a CopyData of %d bytes",
			skipped.XLog.WALStart, size, f.body)
	}
	skipped.Over = &Oversized{Transactional: m[1]&1 != 0, LSN: cdc.LSN(binary.BigEndian.Uint64(m[2:])), Size: size}
	f.out, f.skip = skipped, int64(f.body)
	return nil
}

// eofUnexpected is err with an end of stream made io.ErrUnexpectedEOF, as pgproto3 reports it: the stream
// never ends of itself.
func eofUnexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ReadTimeout reports whether err is a read that ended at the connection's read deadline.
func ReadTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
