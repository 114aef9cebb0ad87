package replication

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

// frames reads the CopyBoth stream of one replication session from its wire. A logical decoding message
// ('M' in an XLogData) is judged from its header before its content is read: one with another prefix than
// the router's, and one with the router's prefix whose content is over limit, is discarded while it is read
// (at most wireBuffer bytes of it held at once) and never buffered whole. Every other message is read whole
// and returned as it came. A read that ends at the connection's read deadline keeps what was read: the next
// call goes on with the same message.
type frames struct {
	w      *wire
	prefix []byte // the router's message prefix and its NUL; nil: every message is discarded (none is wanted)
	limit  int64  // the largest message content read

	// The message being read.
	body   int    // its body length; -1 between messages
	typ    byte   // its type byte
	judged bool   // whether its header was looked at
	skip   int64  // bytes of it still to discard
	out    frame  // what next returns for it once discarded
	buf    []byte // its body read so far, when it is read whole

	// moved says that a call ending at the read deadline consumed part of a message: the server is
	// speaking, only slowly (a large message over a slow link), which is not silence.
	moved bool
}

// frame is one message of the CopyBoth stream. data is the body of a message read whole (for CopyData its
// data), valid until the next call; skipped is set instead for a logical decoding message that was
// discarded, with its XLogData header and, for one with the router's prefix (over the limit), its header.
type frame struct {
	typ     byte
	data    []byte
	skipped bool
	xlog    pglogrepl.XLogData // WALStart and ServerWALEnd of a skipped message; no WALData
	over    *oversized
}

// oversized is the header of a message with the router's prefix whose content was discarded unread.
type oversized struct {
	transactional bool
	lsn           cdc.LSN // the message's own LSN
	size          int64   // its content length
}

func newFrames(w *wire, prefix string, limit int) *frames {
	f := &frames{w: w, limit: int64(limit), body: -1}
	if prefix != "" {
		f.prefix = append([]byte(prefix), 0)
	}
	return f
}

// next returns the next message of the stream.
func (f *frames) next() (frame, error) {
	src := f.w.src
	if f.body < 0 {
		h, err := src.Peek(5)
		if err != nil {
			return frame{}, eofUnexpected(err)
		}
		typ, n := h[0], int(int32(binary.BigEndian.Uint32(h[1:])))
		if n < 4 {
			return frame{}, fmt.Errorf("invalid message length %d on the replication connection", n)
		}
		src.Discard(5)
		f.typ, f.body, f.judged, f.skip, f.out = typ, n-4, false, 0, frame{}
		if cap(f.buf) > keepFrameBuffer {
			f.buf = nil
		}
		f.buf = f.buf[:0]
	}
	if !f.judged {
		if err := f.judge(); err != nil {
			return frame{}, err
		}
		f.judged = true
	}
	if f.out.skipped {
		for f.skip > 0 {
			n, err := src.Discard(int(min(f.skip, 1<<30)))
			f.skip -= int64(n)
			f.moved = f.moved || n > 0
			if err != nil {
				return frame{}, eofUnexpected(err)
			}
		}
		f.body = -1
		return f.out, nil
	}
	if f.body <= src.Size() { // in the read buffer: no copy
		b, err := src.Peek(f.body)
		if err != nil {
			return frame{}, eofUnexpected(err)
		}
		src.Discard(f.body)
		f.body = -1
		return frame{typ: f.typ, data: b}, nil
	}
	if cap(f.buf) < f.body {
		f.buf = append(make([]byte, 0, f.body), f.buf...)
	}
	n, err := io.ReadFull(src, f.buf[len(f.buf):f.body])
	f.buf = f.buf[:len(f.buf)+n]
	f.moved = f.moved || n > 0
	if err != nil {
		return frame{}, eofUnexpected(err)
	}
	f.body = -1
	return frame{typ: f.typ, data: f.buf}, nil
}

// judge looks at the header of a CopyData that holds a logical decoding message and decides whether it is
// discarded. A message too short to hold the router's prefix and a content length is read whole: the
// decoder judges it.
func (f *frames) judge() error {
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
	skipped := frame{typ: f.typ, skipped: true, xlog: pglogrepl.XLogData{
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
			skipped.xlog.WALStart, size, f.body)
	}
	skipped.over = &oversized{transactional: m[1]&1 != 0, lsn: cdc.LSN(binary.BigEndian.Uint64(m[2:])), size: size}
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

// readTimeout reports whether err is a read that ended at the connection's read deadline.
func readTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
