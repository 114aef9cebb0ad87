package decode

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
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
		joinFrames(encBegin(0x200, 7), rel, encInsert(oid, row...), encRelation(oid, "public", "outbox_old", outboxColumns()...),
			encInsert(oid, row...), encRelation(oid+1, "public", "orders", "id"), encInsert(oid+1, text("1")), encCommit(0x200, 0x230)),
		joinFrames(encMessage(false, 1, "p", envelope1), encBegin(0x200, 7), rel, encInsert(oid, row...),
			encMessage(true, 2, "p", envelope1), encMessage(true, 2, "p", signed(envelope1)), encMessage(true, 3, "p", signed(`{"id": 1}`)), encMessage(true, 4, "hb", "{"),
			encCommit(0x200, 0x230)),
		joinFrames(encBegin(0x200, 7), encType(70000, "public", "citext"),
			encRelationTypes(oid, "public", "outbox", outboxColumns(), outboxTypes(map[int]uint32{colAggregateType: 70000})),
			encInsert(oid, row...), encCommit(0x200, 0x230)),
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
		cfg := Config{MaxPayloadBytes: 64, OnDrift: OnDriftQuarantine, EmitKeys: testEmitKeys}
		if len(in)%2 == 1 {
			cfg.OnDrift = OnDriftRefuse
		}
		if len(in)%3 != 0 { // messages with prefix "p" or "hb" are events (the seeds hold both)
			cfg.MessagePrefix = []string{"", "p", "hb"}[len(in)%3]
		}
		d, h := New(cfg), &txnChecker{}
		for i, data := range splitFrames(in) {
			compareWithPglogrepl(t, data)
			at := cdc.LSN(i/3 + 1) // runs of up to three frames share a WAL position, as a COPY's rows do
			if err := d.Decode(at, data, h); err != nil {
				var pe *ProtocolError
				var de *DriftError
				if !errors.As(err, &pe) && !(cfg.OnDrift == OnDriftRefuse && errors.As(err, &de) && de.LSN == at && de.Problem != "") {
					t.Fatalf("frame %d: error %v is neither a *ProtocolError nor, when refusing, a *DriftError", i, err)
				}
			}
			if h.err != nil {
				t.Fatalf("frame %d: %v", i, h.err)
			}
		}
	})
}

// txnChecker is a Handler that records the first call out of the Begin (Event|Quarantine)* Commit order,
// and the first row whose (LSN, Ordinal) is not new in its transaction.
type txnChecker struct {
	open   bool
	commit cdc.LSN
	rows   map[[2]uint64]bool // (LSN, Ordinal) of the open transaction's rows
	err    error
}

func (c *txnChecker) row(at cdc.LSN, ordinal int) {
	key := [2]uint64{uint64(at), uint64(ordinal)}
	if c.rows[key] || ordinal < 0 {
		c.fail("two rows at %s#%d in transaction %s", at, ordinal, c.commit)
	}
	c.rows[key] = true
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
	c.open, c.commit, c.rows = true, commitLSN, map[[2]uint64]bool{}
	return nil
}

func (c *txnChecker) Event(ev cdc.Event) error {
	if !c.open || ev.CommitLSN != c.commit || !cdc.IsUUID(ev.ID) || !pgtext.IsJSON(ev.Payload) || len(ev.Payload) > 64 ||
		len(ev.Headers) > 0 && !pgtext.IsJSONObject(ev.Headers) {
		return c.fail("bad Event %+v in transaction %s (open %v)", ev, c.commit, c.open)
	}
	c.row(ev.LSN, ev.Ordinal)
	return nil
}

func (c *txnChecker) Quarantine(q cdc.Quarantined) error {
	if !c.open && strings.HasPrefix(q.Table, MessageTable) && q.CommitLSN == 0 && strings.Contains(q.Reason, "non-transactional") {
		return nil // a non-transactional message: outside any transaction
	}
	if !c.open || q.CommitLSN != c.commit || q.Reason == "" || q.Table == "" || len(q.EventID) > maxEventID {
		return c.fail("bad Quarantine %+v in transaction %s (open %v)", q, c.commit, c.open)
	}
	for name, v := range q.Columns {
		if len(v.Text) > cdc.MaxStoredValue || v.Null && v.Size != 0 || !v.Null && int64(len(v.Text)) > v.Size {
			return c.fail("bad raw value %s %+v", name, v)
		}
	}
	c.row(q.LSN, q.Ordinal)
	return nil
}

func (c *txnChecker) Commit(commitLSN, endLSN cdc.LSN) error {
	if !c.open || commitLSN != c.commit {
		return c.fail("Commit %s in transaction %s (open %v)", commitLSN, c.commit, c.open)
	}
	c.open = false
	return nil
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
		// PostgreSQL sends only valid JSON for the json and jsonb columns, and Decode relies on that; MapRow
		// reads text, and checks it.
		sendable := true
		for _, c := range []int{colPayload, colHeaders} {
			if v := row[columnName(c)]; v != nil && tuple[c].kind == 't' && !json.Valid([]byte(*v)) {
				sendable = false
			}
		}
		if sendable && (err != nil && viaDecode != "Q "+err.(*RowError).Reason || err == nil && viaDecode != "E "+ev.ID) {
			t.Fatalf("MapRow gives %v, Decode gives %s", err, viaDecode)
		}
		for _, s := range []string{version, schemaVersion} {
			for _, bits := range []uint{32, 64} {
				n, status := pgtext.ParseInt([]byte(s), bits)
				want, werr := strconv.ParseInt(s, 10, int(bits))
				if !sameParse(s, n, status, want, werr) {
					t.Fatalf("pgtext.ParseInt(%q, %d) = %d, %d; strconv gives %d, %v", s, bits, n, status, want, werr)
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
func sameParse(s string, n int64, status pgtext.IntStatus, want int64, werr error) bool {
	var ne *strconv.NumError
	switch {
	case werr == nil:
		return status == pgtext.IntOK && n == want
	case !errors.As(werr, &ne):
		return false
	case ne.Err == strconv.ErrSyntax:
		return status == pgtext.IntSyntax
	}
	digits := strings.TrimLeft(s, "+-")
	return status == pgtext.IntRange || status == pgtext.IntSyntax && strings.Trim(digits, "0123456789") != ""
}
