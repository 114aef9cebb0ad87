package route

import (
	"bytes"
	"errors"
	"net"
	"testing"
)

// batchRecorder records each Write as one socket write.
type batchRecorder struct {
	net.Conn
	writes [][]byte
	err    error
}

func (c *batchRecorder) Write(b []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	c.writes = append(c.writes, append([]byte(nil), b...))
	return len(b), nil
}

// TestCorkConn: uncorked writes go out at once; corked ones are gathered into one write at the last
// uncork (two lanes cork at once); a batch over corkLimit is written in parts, in order; a write error
// is returned by the write or uncork that meets it and by every later one.
func TestCorkConn(t *testing.T) {
	rc := &batchRecorder{}
	c := &corkConn{Conn: rc}
	c.Write([]byte("a"))
	if len(rc.writes) != 1 {
		t.Fatalf("an uncorked write was gathered: %q", rc.writes)
	}
	c.cork()
	c.cork()
	c.Write([]byte("b"))
	c.Write([]byte("c"))
	if err := c.uncork(); err != nil || len(rc.writes) != 1 {
		t.Fatalf("the first of two uncorks wrote: %v %q", err, rc.writes)
	}
	c.Write([]byte("d"))
	if err := c.uncork(); err != nil || len(rc.writes) != 2 || string(rc.writes[1]) != "bcd" {
		t.Fatalf("after the last uncork: %v %q, want a, then bcd", err, rc.writes)
	}
	c.Write([]byte("e"))
	if len(rc.writes) != 3 {
		t.Fatalf("a write after the batch was gathered: %q", rc.writes)
	}

	rc.writes = nil
	c.cork()
	big := bytes.Repeat([]byte("x"), corkLimit/2+1)
	c.Write(big)
	c.Write(big)                                    // over the limit: the first goes out, the second is gathered
	c.Write(bytes.Repeat([]byte("y"), corkLimit+1)) // larger than the limit: written through
	c.uncork()
	var all []byte
	for _, w := range rc.writes {
		all = append(all, w...)
	}
	want := append(append(append([]byte(nil), big...), big...), bytes.Repeat([]byte("y"), corkLimit+1)...)
	if len(rc.writes) != 3 || !bytes.Equal(all, want) {
		t.Fatalf("%d writes of %d bytes, want 3 writes of %d bytes in order", len(rc.writes), len(all), len(want))
	}

	boom := errors.New("connection reset")
	rc.err = boom
	c.cork()
	if _, err := c.Write([]byte("f")); err != nil {
		t.Fatalf("a gathered write failed early: %v", err)
	}
	if err := c.uncork(); !errors.Is(err, boom) {
		t.Fatalf("uncork = %v, want the write's error", err)
	}
	rc.err = nil
	if _, err := c.Write([]byte("g")); !errors.Is(err, boom) {
		t.Fatalf("a write after a failed one = %v, want the first error", err)
	}
}
