package copyboth

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// flakyReader returns at most chunk bytes a read and a read-deadline error after every other read, as a
// replication connection does whose read deadline passes in the middle of a large message.
type flakyReader struct {
	r     io.Reader
	chunk int
	reads int
	read  int64 // bytes returned so far
}

func (f *flakyReader) Read(p []byte) (int, error) {
	f.reads++
	if f.reads%2 == 0 {
		return 0, os.ErrDeadlineExceeded
	}
	n, err := f.r.Read(p[:min(len(p), f.chunk)])
	f.read += int64(n)
	return n, err
}

func copyData(data []byte) []byte {
	b, _ := (&pgproto3.CopyData{Data: data}).Encode(nil)
	return b
}

func xlog(walStart uint64, walData []byte) []byte {
	b := []byte{'w'}
	b = binary.BigEndian.AppendUint64(b, walStart)
	b = binary.BigEndian.AppendUint64(b, walStart+100)
	b = binary.BigEndian.AppendUint64(b, 0)
	return append(b, walData...)
}

func message(transactional bool, prefix string, content []byte) []byte {
	b := []byte{'M', 0}
	if transactional {
		b[1] = 1
	}
	b = binary.BigEndian.AppendUint64(b, 42)
	b = append(append(b, prefix...), 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(content)))
	return append(b, content...)
}

// TestFramesDiscardMessagesFromTheirHeader: a message with another prefix, and one with the router's prefix
// over the limit, are discarded while they are read, across reads that end at the read deadline; the
// frames around them, and a message under the limit, come whole and in order.
func TestFramesDiscardMessagesFromTheirHeader(t *testing.T) {
	const limit = 1000
	big := bytes.Repeat([]byte("x"), 3<<20)
	small := []byte(`{"id": "a"}`)
	var stream []byte
	stream = append(stream, copyData([]byte{'k', 1, 2, 3})...)
	stream = append(stream, copyData(xlog(1, message(true, "someone-else", big)))...)
	stream = append(stream, copyData(xlog(2, message(true, "cdc", big[:limit+1])))...)
	stream = append(stream, copyData(xlog(3, message(false, "cdc", small)))...)
	stream = append(stream, copyData(xlog(4, message(false, "cd", big[:limit*2])))...) // a prefix of the prefix
	stream = append(stream, copyData(xlog(5, []byte{'B', 9}))...)
	e, _ := (&pgproto3.ErrorResponse{Severity: "ERROR", Code: "XX000", Message: "boom"}).Encode(nil)
	stream = append(stream, e...)

	src := &flakyReader{r: bytes.NewReader(stream), chunk: 7000}
	f := NewFrames(&Wire{src: bufio.NewReaderSize(src, wireBuffer)}, "cdc", limit)
	var got []Frame
	for len(got) < 7 {
		fr, err := f.Next()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if !ReadTimeout(err) {
				t.Fatalf("ReadTimeout(%v) = false", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("frame %d: %v", len(got), err)
		}
		fr.Data = append([]byte(nil), fr.Data...)
		got = append(got, fr)
	}
	if got[0].Type != 'd' || got[0].Data[0] != 'k' || got[0].Skipped {
		t.Errorf("keepalive: %+v", got[0])
	}
	if !got[1].Skipped || got[1].Over != nil || got[1].Data != nil || got[1].XLog.WALStart != 1 || got[1].XLog.ServerWALEnd != 101 {
		t.Errorf("another prefix: %+v, want skipped with its XLogData header", got[1])
	}
	if o := got[2].Over; !got[2].Skipped || o == nil || !o.Transactional || o.Size != limit+1 || o.LSN != 42 || got[2].XLog.WALStart != 2 {
		t.Errorf("the router's prefix over the limit: %+v %+v", got[2], got[2].Over)
	}
	if got[3].Skipped || !bytes.Equal(got[3].Data, xlog(3, message(false, "cdc", small))) {
		t.Errorf("the router's prefix under the limit: %+v, want it whole", got[3])
	}
	if !got[4].Skipped || got[4].Over != nil {
		t.Errorf("prefix cd: %+v, want skipped", got[4])
	}
	if got[5].Skipped || !bytes.Equal(got[5].Data, xlog(5, []byte{'B', 9})) {
		t.Errorf("XLogData: %+v", got[5])
	}
	if got[6].Type != 'E' {
		t.Errorf("ErrorResponse: %+v", got[6])
	}
	_, err := f.Next()
	for ReadTimeout(err) {
		_, err = f.Next()
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("after the last frame: %v, want io.ErrUnexpectedEOF", err)
	}
	if cap(f.buf) > keepFrameBuffer {
		t.Errorf("frame buffer of %d bytes kept", cap(f.buf))
	}
}

// TestWireNeverReadsPastAMessage: pgproto3 reading through a wire leaves every byte after the message it
// asked for in the wire, so that the stream can be taken over between two messages.
func TestWireNeverReadsPastAMessage(t *testing.T) {
	var stream []byte
	c, _ := (&pgproto3.CopyBothResponse{}).Encode(nil)
	stream = append(stream, c...)
	after := copyData(xlog(7, []byte{'B'}))
	stream = append(stream, after...)
	w := &Wire{src: bufio.NewReaderSize(bytes.NewReader(stream), wireBuffer)}
	fe := pgproto3.NewFrontend(w, io.Discard)
	msg, err := fe.Receive()
	if _, ok := msg.(*pgproto3.CopyBothResponse); !ok || err != nil {
		t.Fatalf("Receive: %T %v", msg, err)
	}
	f := NewFrames(w, "", 100)
	fr, err := f.Next()
	if err != nil || !bytes.Equal(fr.Data, after[5:]) {
		t.Fatalf("the next frame: %q %v, want %q", fr.Data, err, after[5:])
	}
}

// loopReader repeats one stream forever.
type loopReader struct {
	b   []byte
	off int
}

func (l *loopReader) Read(p []byte) (int, error) {
	n := copy(p, l.b[l.off:])
	l.off = (l.off + n) % len(l.b)
	return n, nil
}

// BenchmarkFrames reads 300-byte XLogData messages (an insert's size) through frames, and through pgproto3
// as pgconn's ReceiveMessage did, for comparison.
func BenchmarkFrames(b *testing.B) {
	one := copyData(xlog(1, append([]byte{'I'}, bytes.Repeat([]byte("r"), 300)...)))
	stream := bytes.Repeat(one, 1000)
	b.Run("frames", func(b *testing.B) {
		f := NewFrames(&Wire{src: bufio.NewReaderSize(&loopReader{b: stream}, wireBuffer)}, "cdc-router.outbox", 1<<24)
		b.SetBytes(int64(len(one)))
		b.ReportAllocs()
		for range b.N {
			if _, err := f.Next(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pgproto3", func(b *testing.B) {
		fe := pgproto3.NewFrontend(&loopReader{b: stream}, io.Discard)
		b.SetBytes(int64(len(one)))
		b.ReportAllocs()
		for range b.N {
			if _, err := fe.Receive(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestFramesReady: Ready is true exactly while the next message is in the read buffer whole, so that the
// stream handles it without a read that could wait.
func TestFramesReady(t *testing.T) {
	one, two := copyData(xlog(7, []byte{'B'})), copyData(xlog(8, []byte{'C'}))
	r, w := io.Pipe()
	f := NewFrames(&Wire{src: bufio.NewReaderSize(r, wireBuffer)}, "", 100)
	if f.Ready() {
		t.Fatal("Ready before anything was read")
	}
	go func() { w.Write(append(append([]byte{}, one...), two[:len(two)-1]...)) }()
	if _, err := f.Next(); err != nil {
		t.Fatal(err)
	}
	if f.Ready() {
		t.Fatal("Ready with the second message in the buffer but its last byte not")
	}
	go func() { w.Write(two[len(two)-1:]) }()
	if fr, err := f.Next(); err != nil || !bytes.Equal(fr.Data, two[5:]) {
		t.Fatalf("second frame: %q %v", fr.Data, err)
	}
	if f.Ready() {
		t.Fatal("Ready with an empty buffer")
	}
	go func() { w.Write(append(append([]byte{}, one...), two...)) }()
	if _, err := f.Next(); err != nil {
		t.Fatal(err)
	}
	if !f.Ready() {
		t.Fatal("not Ready with the next message whole in the buffer")
	}
}
