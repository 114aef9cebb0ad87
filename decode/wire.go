package decode

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// pgoutput message type bytes (PostgreSQL docs, "Logical Replication Message Formats").
const (
	msgBegin    = 'B'
	msgCommit   = 'C'
	msgOrigin   = 'O'
	msgRelation = 'R'
	msgType     = 'Y'
	msgInsert   = 'I'
	msgUpdate   = 'U'
	msgDelete   = 'D'
	msgTruncate = 'T'
	msgMessage  = 'M'
)

// TupleData column kinds (pgtext's).
const (
	kindNull      = pgtext.KindNull
	kindUnchanged = pgtext.KindUnchanged
	kindText      = pgtext.KindText
	kindBinary    = pgtext.KindBinary
)

// value is one TupleData column (pgtext.Value, which decode/mapping reads too). Data aliases the WAL
// buffer and is valid only during one Decode call.
type value = pgtext.Value

// reader reads pgoutput fields with bounds checks. The first short or malformed read records a reason
// in err; every later read then returns zero values, so a parse function checks err once at the end.
type reader struct {
	buf []byte
	err string
}

func (r *reader) fail(reason string) {
	if r.err == "" {
		r.err = reason
	}
	r.buf = nil
}

func (r *reader) take(n int, field string) []byte {
	if r.err != "" {
		return nil
	}
	if n < 0 || n > len(r.buf) {
		r.fail("truncated at " + field)
		return nil
	}
	b := r.buf[:n:n]
	r.buf = r.buf[n:]
	return b
}

// takeLong is take for a length read from the wire, which may exceed the int range.
func (r *reader) takeLong(n uint64, field string) []byte {
	return r.take(int(min(n, uint64(len(r.buf))+1)), field)
}

func (r *reader) u8(field string) byte {
	if b := r.take(1, field); b != nil {
		return b[0]
	}
	return 0
}

func (r *reader) u16(field string) uint16 {
	if b := r.take(2, field); b != nil {
		return binary.BigEndian.Uint16(b)
	}
	return 0
}

func (r *reader) u32(field string) uint32 {
	if b := r.take(4, field); b != nil {
		return binary.BigEndian.Uint32(b)
	}
	return 0
}

func (r *reader) lsn(field string) cdc.LSN {
	if b := r.take(8, field); b != nil {
		return cdc.LSN(binary.BigEndian.Uint64(b))
	}
	return 0
}

// cstring reads a NUL-terminated string and returns it without the NUL, aliasing the buffer.
func (r *reader) cstring(field string) []byte {
	if r.err != "" {
		return nil
	}
	end := bytes.IndexByte(r.buf, 0)
	if end < 0 {
		r.fail("unterminated string " + field)
		return nil
	}
	s := r.buf[:end:end]
	r.buf = r.buf[end+1:]
	return s
}

// end reports the first failure, or trailing bytes after the last field.
func (r *reader) end() string {
	if r.err == "" && len(r.buf) > 0 {
		return fmt.Sprintf("%d trailing bytes", len(r.buf))
	}
	return r.err
}

// tuple reads a TupleData into dst[:0] and returns it.
func (r *reader) tuple(dst []value) []value {
	n := int(r.u16("tuple column count"))
	if n > len(r.buf) { // every column takes at least its kind byte
		r.fail(fmt.Sprintf("tuple claims %d columns in %d bytes", n, len(r.buf)))
		return dst[:0]
	}
	dst = dst[:0]
	for i := 0; i < n && r.err == ""; i++ {
		v := value{Kind: r.u8("tuple column kind")}
		switch v.Kind {
		case kindNull, kindUnchanged:
		case kindText, kindBinary:
			size := r.u32("tuple column length")
			v.Data = r.takeLong(uint64(size), "tuple column data")
		default:
			r.fail(fmt.Sprintf("tuple column %d has unknown kind %q", i, v.Kind))
		}
		dst = append(dst, v)
	}
	return dst
}

// relationMsg is a parsed Relation message.
type relationMsg struct {
	oid       uint32
	namespace string
	name      string
	columns   []string
	types     []uint32 // each column's type OID (pg_type.oid), in the order of columns
}

func (r *reader) relation() relationMsg {
	m := relationMsg{oid: r.u32("relation OID")}
	m.namespace = string(r.cstring("namespace"))
	m.name = string(r.cstring("relation name"))
	r.u8("replica identity")
	n := int(r.u16("column count"))
	const minColumn = 10 // flags, NUL, type OID, type modifier
	if n*minColumn > len(r.buf) {
		r.fail(fmt.Sprintf("relation claims %d columns in %d bytes", n, len(r.buf)))
		return m
	}
	m.columns, m.types = make([]string, 0, n), make([]uint32, 0, n)
	for i := 0; i < n && r.err == ""; i++ {
		r.u8("column flags")
		m.columns = append(m.columns, string(r.cstring("column name")))
		m.types = append(m.types, r.u32("column type OID"))
		r.u32("column type modifier")
	}
	return m
}

// skipTruncate reads a Truncate message body.
func (r *reader) skipTruncate() {
	n := r.u32("relation count")
	r.u8("options")
	r.takeLong(uint64(n)*4, "relation OIDs")
}

// marker reads a one-byte tuple marker that must be want.
func (r *reader) marker(field string, want byte) {
	if m := r.u8(field); m != want && r.err == "" {
		r.fail(fmt.Sprintf("%s %q, want %q", field, m, want))
	}
}
