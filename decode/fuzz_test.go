package decode

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/jackc/pglogrepl"
)

// joinFrames encodes a frame sequence as FuzzDecode input: each WALData prefixed by its 2-byte length.
func joinFrames(frames ...[]byte) []byte {
	var b []byte
	for _, f := range frames {
		b = append(binary.BigEndian.AppendUint16(b, uint16(len(f))), f...)
	}
	return b
}

// splitFrames undoes joinFrames; a length past the end takes the rest, so every input is a sequence.
func splitFrames(b []byte) [][]byte {
	var frames [][]byte
	for len(b) >= 2 {
		n := min(int(binary.BigEndian.Uint16(b)), len(b)-2)
		frames, b = append(frames, b[2:2+n]), b[2+n:]
	}
	return frames
}

func handBuiltSequences() [][]byte {
	const oid = 16385
	rel := encRelation(oid, "public", "outbox", outboxColumns()...)
	row := outboxRow(id1, "1")
	reversed := outboxColumns()
	slices.Reverse(reversed)
	return [][]byte{
		joinFrames(encBegin(0x200, 7), rel, encInsert(oid, row...), encInsert(oid, outboxRow(id2, "2")...), encCommit(0x200, 0x230)),
		joinFrames(encMessage(false, 1, "hb", ""), encBegin(0x200, 7), encOrigin(1, "o"), encType(70000, "public", "mood"), rel,
			encUpdate(oid, 'K', row, row), encDelete(oid, 'O', row...), encTruncate(oid), encCommit(0x200, 0x230)),
		joinFrames(encBegin(0x200, 7), encRelation(oid, "public", "outbox", reversed...),
			encInsert(oid, withColumn(row, 7, text("[1,2]"))...), encInsert(oid, withColumn(row, 3, unchanged())...), encCommit(0x200, 0x230)),
	}
}

// FuzzDecode feeds arbitrary frame sequences to a Decoder: it must return errors, never panic, and what
// it hands the Handler must be a well-formed transaction.
func FuzzDecode(f *testing.F) {
	for _, seq := range handBuiltSequences() {
		f.Add(seq)
		for _, frame := range splitFrames(seq) {
			f.Add(joinFrames(frame))
		}
	}
	frames, err := readFrames()
	if err != nil {
		f.Fatal(err)
	}
	all := make([][]byte, 0, len(frames))
	for _, fr := range frames {
		all = append(all, fr.data)
		f.Add(joinFrames(fr.data))
	}
	f.Add(joinFrames(all...))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, h := New(Config{MaxPayloadBytes: 64}), &txnChecker{}
		for i, data := range splitFrames(in) {
			compareWithPglogrepl(t, data)
			if err := d.Decode(cdc.LSN(i+1), data, h); err != nil {
				var pe *ProtocolError
				if !errors.As(err, &pe) {
					t.Fatalf("frame %d: error %v is not a *ProtocolError", i, err)
				}
			}
			if h.err != nil {
				t.Fatalf("frame %d: %v", i, h.err)
			}
		}
	})
}

// txnChecker is a Handler that records the first call out of the Begin (Event|Quarantine)* Commit order.
type txnChecker struct {
	open   bool
	commit cdc.LSN
	err    error
}

func (c *txnChecker) fail(format string, args ...any) error {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
	return nil
}

func (c *txnChecker) Begin(commitLSN cdc.LSN) error {
	if c.open {
		return c.fail("Begin %s inside %s", commitLSN, c.commit)
	}
	c.open, c.commit = true, commitLSN
	return nil
}

func (c *txnChecker) Event(ev cdc.Event) error {
	if !c.open || ev.CommitLSN != c.commit || !isUUID([]byte(ev.ID)) || !isJSON(ev.Payload) || len(ev.Payload) > 64 ||
		len(ev.Headers) > 0 && !isJSONObject(ev.Headers) {
		return c.fail("bad Event %+v in transaction %s (open %v)", ev, c.commit, c.open)
	}
	return nil
}

func (c *txnChecker) Quarantine(q cdc.Quarantined) error {
	if !c.open || q.CommitLSN != c.commit || q.Reason == "" || q.Table != "public.outbox" {
		return c.fail("bad Quarantine %+v in transaction %s (open %v)", q, c.commit, c.open)
	}
	return nil
}

func (c *txnChecker) Commit(commitLSN, endLSN cdc.LSN) error {
	if !c.open || commitLSN != c.commit {
		return c.fail("Commit %s in transaction %s (open %v)", commitLSN, c.commit, c.open)
	}
	c.open = false
	return nil
}

// compareWithPglogrepl checks that a Begin, Commit, Relation or Insert that this package's reader accepts
// is read the same by pglogrepl.Parse.
func compareWithPglogrepl(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	r := &reader{buf: data[1:]}
	var mine string
	switch data[0] {
	case msgBegin:
		mine = fmt.Sprintf("B %d", r.lsn(""))
		r.take(12, "")
	case msgCommit:
		r.u8("")
		mine = fmt.Sprintf("C %d %d", r.lsn(""), r.lsn(""))
		r.take(8, "")
	case msgRelation:
		m := r.relation()
		mine = fmt.Sprintf("R %d %q %q %q", m.oid, m.namespace, m.name, m.columns)
	case msgInsert:
		oid := r.u32("")
		r.marker("", 'N')
		mine = fmt.Sprintf("I %d %s", oid, tupleString(r.tuple(nil)))
	default:
		return
	}
	if r.end() != "" {
		return
	}
	defer func() {
		if p := recover(); p != nil {
			t.Fatalf("pglogrepl panics on a message this package accepts (%s): %v", mine, p)
		}
	}()
	msg, err := pglogrepl.Parse(data)
	if err != nil && data[0] == msgInsert && len(data) == 8 {
		return // pglogrepl wants 8 bytes after the type, one more than an insert into a table without columns has
	}
	if err != nil {
		t.Fatalf("pglogrepl rejects a message this package accepts (%s): %v", mine, err)
	}
	var theirs string
	switch m := msg.(type) {
	case *pglogrepl.BeginMessage:
		theirs = fmt.Sprintf("B %d", m.FinalLSN)
	case *pglogrepl.CommitMessage:
		theirs = fmt.Sprintf("C %d %d", m.CommitLSN, m.TransactionEndLSN)
	case *pglogrepl.RelationMessage:
		names := []string{}
		for _, c := range m.Columns {
			names = append(names, c.Name)
		}
		theirs = fmt.Sprintf("R %d %q %q %q", m.RelationID, m.Namespace, m.RelationName, names)
	case *pglogrepl.InsertMessage:
		var tuple []value
		for _, c := range m.Tuple.Columns {
			tuple = append(tuple, value{kind: c.DataType, data: c.Data})
		}
		theirs = fmt.Sprintf("I %d %s", m.RelationID, tupleString(tuple))
	}
	if mine != theirs {
		t.Fatalf("this package reads %s, pglogrepl reads %s", mine, theirs)
	}
}

func tupleString(tuple []value) string {
	s := ""
	for _, v := range tuple {
		s += fmt.Sprintf("%c%q ", v.kind, v.data)
	}
	return s
}

// FuzzRow checks the row mapping: MapRow and Decode agree on every row, never panic, fail only with a
// *RowError, and an event carries the column values unchanged.
func FuzzRow(f *testing.F) {
	f.Add(id1, "order", "o-1", "42", "OrderPlaced", "1", `{"a": 1}`, `{"t": "x"}`, "2024-01-02 03:04:05.123456+00", uint32(0))
	f.Add("x", "", "", "-9223372036854775808", "", "2147483648", `[1,2`, `[1,2]`, "2024-01-02 03:04:05+05:30", uint32(1<<7|1<<9))
	f.Add(id2, "a", "b", "0x10", "e", "+7", `"s"`, ``, "0001-01-01 00:00:00+00 BC", uint32(1<<4|1<<11))
	f.Fuzz(func(t *testing.T, id, aggType, aggID, version, eventType, schemaVersion, payload, headers, occurredAt string, mask uint32) {
		texts := []string{id, aggType, aggID, version, eventType, schemaVersion, payload, headers, occurredAt}
		row := map[string]*string{}
		tuple := make([]tv, numColumns)
		for c, s := range texts { // mask bit c: NULL; bit c+9: absent
			switch {
			case mask&(1<<(c+numColumns)) != 0:
				tuple[c] = unchanged()
			case mask&(1<<c) != 0:
				row[columnName(c)], tuple[c] = nil, null()
			default:
				row[columnName(c)], tuple[c] = &texts[c], text(s)
			}
		}
		cfg := Config{MaxPayloadBytes: 256}
		ev, err := MapRow(cfg, row)
		checkMapRow(t, texts, row, ev, err)
		viaDecode := viaDecode(t, cfg, tuple)
		if err != nil && viaDecode != "Q "+err.(*RowError).Reason || err == nil && viaDecode != "E "+ev.ID {
			t.Fatalf("MapRow gives %v, Decode gives %s", err, viaDecode)
		}
		for _, s := range []string{version, schemaVersion} {
			for _, bits := range []uint{32, 64} {
				n, status := parseInt([]byte(s), bits)
				want, werr := strconv.ParseInt(s, 10, int(bits))
				if !sameParse(s, n, status, want, werr) {
					t.Fatalf("parseInt(%q, %d) = %d, %d; strconv gives %d, %v", s, bits, n, status, want, werr)
				}
			}
		}
	})
}

func checkMapRow(t *testing.T, texts []string, row map[string]*string, ev cdc.Event, err error) {
	if err != nil {
		var re *RowError
		if !errors.As(err, &re) || re.Reason == "" {
			t.Fatalf("error %v is not a *RowError with a reason", err)
		}
		return
	}
	if ev.ID != texts[colID] || ev.AggregateType != texts[colAggregateType] || ev.AggregateID != texts[colAggregateID] ||
		ev.EventType != texts[colEventType] || string(ev.Payload) != texts[colPayload] ||
		strconv.FormatInt(ev.AggregateVersion, 10) != trimPlus(texts[colAggregateVersion]) {
		t.Fatalf("event %+v from %q", ev, texts)
	}
	if h := row["headers"]; h != nil && string(ev.Headers) != *h || h == nil && len(ev.Headers) != 0 {
		t.Fatalf("headers %q from %v", ev.Headers, h)
	}
}

// trimPlus drops a leading "+" and leading zeros, as integer formatting does.
func trimPlus(s string) string {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return s
	}
	return strconv.FormatInt(n, 10)
}

// viaDecode decodes tuple as an outbox insert and returns "E <id>" or "Q <reason>".
func viaDecode(t *testing.T, cfg Config, tuple []tv) string {
	const oid = 1
	rec, err := decodeFrames(cfg, []frame{{1, encBegin(2, 3)}, {0, encRelation(oid, "public", "outbox", outboxColumns()...)},
		{1, encInsert(oid, tuple...)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.events) == 1 {
		return "E " + rec.events[0].ID
	}
	return "Q " + rec.quarantined[0].Reason
}

// sameParse reports whether parseInt's result matches strconv.ParseInt's. strconv reports a range error as
// soon as the digits overflow, even when a non-digit follows; parseInt reports that as a syntax error.
func sameParse(s string, n int64, status intStatus, want int64, werr error) bool {
	var ne *strconv.NumError
	switch {
	case werr == nil:
		return status == intOK && n == want
	case !errors.As(werr, &ne):
		return false
	case ne.Err == strconv.ErrSyntax:
		return status == intSyntax
	}
	digits := strings.TrimLeft(s, "+-")
	return status == intRange || status == intSyntax && strings.Trim(digits, "0123456789") != ""
}
