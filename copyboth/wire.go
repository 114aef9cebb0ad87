package copyboth

import (
	"bufio"
	"encoding/binary"
	"io"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// wireBuffer is the read buffer of the replication connection: the most read from the socket at once, and
// the most held of a message that is discarded while it is read.
const wireBuffer = 64 << 10

// Wire is the read side of the replication connection: every byte pgconn reads from the server passes
// through it, below pgproto3's message reader and above pgconn's own reader (so TLS included). Until the
// stream starts it hands pgconn whole messages only, never a byte past the end of the current one, so that
// pgproto3 has buffered nothing of what follows the CopyBothResponse when START_REPLICATION returns; from
// then on the stream reads the CopyBoth stream from it directly (Frames), and pgconn is used only to write
// (status updates) and to close.
type Wire struct {
	src  *bufio.Reader
	left int // bytes of the current message that pgconn has not read yet; 0 at a message boundary
}

// Install makes every connection cfg opens read through a Wire and returns the function that says which
// Wire the connection returned by pgconn.ConnectConfig reads through. pgconn builds the frontend once per
// connection attempt, one attempt after the other, so the last one built is the returned connection's.
func Install(cfg *pgconn.Config) func() *Wire {
	var last *Wire
	cfg.BuildFrontend = func(r io.Reader, w io.Writer) *pgproto3.Frontend {
		last = &Wire{src: bufio.NewReaderSize(r, wireBuffer)}
		return pgproto3.NewFrontend(last, w)
	}
	return func() *Wire { return last }
}

// Read implements io.Reader for pgproto3: it never returns bytes past the end of the message that starts
// at the first byte it returns. An error leaves what was read in the buffer (a read deadline is retried).
func (w *Wire) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if w.left == 0 {
		h, err := w.src.Peek(5)
		if err != nil {
			return 0, err
		}
		// A length below 4 is pgproto3's to refuse; hand it the header alone.
		w.left = 5 + max(int(int32(binary.BigEndian.Uint32(h[1:])))-4, 0)
	}
	n, err := w.src.Read(p[:min(len(p), w.left)])
	w.left -= n
	return n, err
}
