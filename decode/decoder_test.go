package decode

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// recorder is a Handler that logs every call and keeps what it received.
type recorder struct {
	log         []string
	shape       []string // the log without LSNs: "B", "E <id>", "Q <id>: <reason>", "C"
	begins      []cdc.LSN
	ends        [][2]cdc.LSN // commit LSN, end LSN
	events      []cdc.Event
	quarantined []cdc.Quarantined
	fail        error // returned by every call when set
}

func (r *recorder) Begin(commitLSN cdc.LSN) error {
	r.log = append(r.log, "Begin "+commitLSN.String())
	r.shape, r.begins = append(r.shape, "B"), append(r.begins, commitLSN)
	return r.fail
}

func (r *recorder) Event(ev cdc.Event) error {
	r.log = append(r.log, fmt.Sprintf("Event %s v%d commit=%s", ev.ID, ev.AggregateVersion, ev.CommitLSN))
	r.events = append(r.events, ev)
	r.shape = append(r.shape, "E "+ev.ID)
	return r.fail
}

func (r *recorder) Quarantine(q cdc.Quarantined) error {
	r.log = append(r.log, fmt.Sprintf("Quarantine %s lsn=%s commit=%s: %s", q.Table, q.LSN, q.CommitLSN, q.Reason))
	r.quarantined = append(r.quarantined, q)
	r.shape = append(r.shape, fmt.Sprintf("Q %s: %s", rawText(q.Columns["id"]), q.Reason))
	return r.fail
}

func (r *recorder) Commit(commitLSN, endLSN cdc.LSN) error {
	r.log = append(r.log, "Commit "+commitLSN.String()+" "+endLSN.String())
	r.shape, r.ends = append(r.shape, "C"), append(r.ends, [2]cdc.LSN{commitLSN, endLSN})
	return r.fail
}

type frame struct {
	walStart cdc.LSN
	data     []byte
}

const (
	id1 = "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11"
	id2 = "b1ffcd00-0d1c-4ef8-bb6d-6bb9bd380a22"
)

// decodeFrames feeds frames to a new Decoder and returns the recorder and the first error.
func decodeFrames(cfg Config, frames []frame) (*recorder, error) {
	d, rec := New(cfg), &recorder{}
	for i, f := range frames {
		if err := d.Decode(f.walStart, f.data, rec); err != nil {
			return rec, fmt.Errorf("frame %d: %w", i, err)
		}
	}
	return rec, nil
}

func TestDecodeTransactions(t *testing.T) {
	const oid, other = 16385, 16400
	begin := frame{0x100, encBegin(0x200, 7)}
	commit := frame{0x230, encCommit(0x200, 0x230)}
	rel := frame{0, encRelation(oid, "public", "outbox", outboxColumns()...)}
	ins := func(id, version string) frame { return frame{0x110, encInsert(oid, outboxRow(id, version)...)} }
	reordered := []string{"occurred_at", "extra", "payload", "headers", "schema_version", "event_type",
		"aggregate_version", "aggregate_id", "aggregate_type", "id"}
	reorderedRow := []tv{text("2024-01-02 03:04:05+05:30"), text("ignored"), text(`[1, 2]`), null(), text("2"),
		text("OrderShipped"), text("9"), text("o-2"), text("order"), text(id2)}
	tests := []struct {
		name    string
		cfg     Config
		frames  []frame
		want    []string
		wantErr string
	}{
		{name: "events in order between Begin and Commit",
			frames: []frame{begin, rel, ins(id1, "1"), ins(id2, "2"), commit},
			want:   []string{"Begin 0/200", "Event " + id1 + " v1 commit=0/200", "Event " + id2 + " v2 commit=0/200", "Commit 0/200 0/230"}},
		{name: "a new Relation with another column order replaces the entry",
			frames: []frame{begin, rel, ins(id1, "1"),
				{0, encRelation(oid, "public", "outbox", reordered...)}, {0x120, encInsert(oid, reorderedRow...)}, commit},
			want: []string{"Begin 0/200", "Event " + id1 + " v1 commit=0/200", "Event " + id2 + " v9 commit=0/200", "Commit 0/200 0/230"}},
		{name: "a configured table name is matched",
			cfg:    Config{Table: "events.box"},
			frames: []frame{begin, {0, encRelation(other, "events", "box", outboxColumns()...)}, {0x110, encInsert(other, outboxRow(id1, "1")...)}, commit},
			want:   []string{"Begin 0/200", "Event " + id1 + " v1 commit=0/200", "Commit 0/200 0/230"}},
		{name: "updates, deletes, truncates, origin, type and message are not events",
			frames: []frame{{0, encMessage(false, 0x90, "hb", "x")}, begin, {0, encOrigin(0x50, "node")}, {0, encType(70000, "public", "mood")}, rel,
				{0x110, encUpdate(oid, 0, nil, outboxRow(id1, "1"))},
				{0x111, encUpdate(oid, 'K', outboxRow(id1, "1"), outboxRow(id1, "2"))},
				{0x112, encUpdate(oid, 'O', outboxRow(id1, "1"), outboxRow(id1, "2"))},
				{0x113, encDelete(oid, 'K', outboxRow(id1, "1")...)},
				{0x114, encDelete(oid, 'O', outboxRow(id1, "1")...)},
				{0x115, encTruncate(oid)}, {0, encMessage(true, 0x116, "p", "body")}, commit},
			want: []string{"Begin 0/200", "Commit 0/200 0/230"}},
		{name: "a bad row is quarantined with the insert's LSN",
			frames: []frame{begin, rel, {0x150, encInsert(oid, withColumn(outboxRow(id1, "1"), 7, text("[1,2]"))...)}, commit},
			want:   []string{"Begin 0/200", "Quarantine public.outbox lsn=0/150 commit=0/200: headers is not a JSON object", "Commit 0/200 0/230"}},
		{name: "an unchanged TOAST value is absent, not empty",
			frames: []frame{begin, rel, {0x150, encInsert(oid, withColumn(outboxRow(id1, "1"), 4, unchanged())...)}, commit},
			want:   []string{"Begin 0/200", "Quarantine public.outbox lsn=0/150 commit=0/200: column event_type is missing", "Commit 0/200 0/230"}},
		{name: "Check rejects a row",
			cfg:    Config{Check: func(ev cdc.Event) error { return errors.New("routing key too long") }},
			frames: []frame{begin, rel, ins(id1, "1"), commit},
			want:   []string{"Begin 0/200", "Quarantine public.outbox lsn=0/110 commit=0/200: routing key too long", "Commit 0/200 0/230"}},
		{name: "insert for an unknown relation OID", frames: []frame{begin, ins(id1, "1")},
			wantErr: "relation OID 16385 was not announced"},
		{name: "update for an unknown relation OID", frames: []frame{begin, {1, encUpdate(99, 0, nil, outboxRow(id1, "1"))}},
			wantErr: "relation OID 99 was not announced"},
		{name: "delete for an unknown relation OID", frames: []frame{begin, {1, encDelete(99, 'K', text(id1))}},
			wantErr: "relation OID 99 was not announced"},
		{name: "insert outside Begin…Commit", frames: []frame{rel, ins(id1, "1")}, wantErr: "change outside Begin"},
		{name: "insert after Commit", frames: []frame{begin, rel, commit, ins(id1, "1")}, wantErr: "change outside Begin"},
		{name: "truncate outside Begin…Commit", frames: []frame{{1, encTruncate(oid)}}, wantErr: "Truncate outside"},
		{name: "Begin inside a transaction", frames: []frame{begin, begin}, wantErr: "inside transaction"},
		{name: "Commit without Begin", frames: []frame{commit}, wantErr: "without Begin"},
		{name: "Commit of another transaction", frames: []frame{begin, {1, encCommit(0x300, 0x330)}}, wantErr: "differs from the Begin final LSN"},
		{name: "tuple and relation disagree", frames: []frame{begin, rel, {1, encInsert(oid, text(id1))}}, wantErr: "tuple has 1 columns"},
		{name: "binary value", frames: []frame{begin, rel, {1, encInsert(oid, withColumn(outboxRow(id1, "1"), 2, tv{'b', "x"})...)}}, wantErr: "text mode"},
		{name: "stream start", frames: []frame{{1, []byte{'S', 0, 0, 0, 1, 1}}}, wantErr: "streaming and two-phase"},
		{name: "begin prepare", frames: []frame{{1, []byte{'b'}}}, wantErr: "streaming and two-phase"},
		{name: "unknown type", frames: []frame{{1, []byte{'Z', 1}}}, wantErr: "unknown message type"},
		{name: "empty message", frames: []frame{{1, nil}}, wantErr: "empty message"},
		{name: "trailing bytes", frames: []frame{{1, append(encBegin(1, 1), 0)}}, wantErr: "1 trailing bytes"},
		{name: "huge tuple column length", frames: []frame{begin, rel, {1, []byte{'I', 0, 0, 0x40, 0x01, 'N', 0, 1, 't', 0xFF, 0xFF, 0xFF, 0xFF, 'x'}}},
			wantErr: "truncated at tuple column data"},
		{name: "huge truncate relation count", frames: []frame{begin, {1, []byte{'T', 0xFF, 0xFF, 0xFF, 0xFF, 0, 1, 2, 3, 4}}},
			wantErr: "truncated at relation OIDs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rec, err := decodeFrames(tt.cfg, tt.frames)
			if tt.wantErr != "" {
				var pe *ProtocolError
				if !errors.As(err, &pe) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error = %v, want a *ProtocolError containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(rec.log, tt.want) {
				t.Errorf("handler calls:\n got %q\nwant %q", rec.log, tt.want)
			}
		})
	}
}

// withColumn returns row with column i replaced.
func withColumn(row []tv, i int, v tv) []tv {
	row = slices.Clone(row)
	row[i] = v
	return row
}

func TestDecodeEventFieldsAndCopies(t *testing.T) {
	const oid = 16385
	reordered := []string{"headers", "extra", "payload", "occurred_at", "schema_version", "event_type",
		"aggregate_version", "aggregate_id", "aggregate_type", "id"}
	buf := encInsert(oid, null(), text("x"), text(`[1, 2]`), text("2024-01-02 03:04:05+05:30"), text("2"),
		text("OrderShipped"), text("-9"), text("o-2"), text("order"), text(id2))
	d, rec := New(Config{}), &recorder{}
	for _, f := range []frame{{1, encBegin(0x200, 7)}, {0, encRelation(oid, "public", "outbox", reordered...)}, {0x110, buf}} {
		if err := d.Decode(f.walStart, f.data, rec); err != nil {
			t.Fatal(err)
		}
	}
	for i := range buf { // the WAL buffer is reused by the next receive
		buf[i] = 0
	}
	want := cdc.Event{ID: id2, AggregateType: "order", AggregateID: "o-2", AggregateVersion: -9, EventType: "OrderShipped",
		SchemaVersion: 2, Payload: []byte(`[1, 2]`), OccurredAt: time.Date(2024, 1, 1, 21, 34, 5, 0, time.UTC), CommitLSN: 0x200,
		LSN: 0x110}
	if len(rec.events) != 1 {
		t.Fatalf("events = %d, want 1", len(rec.events))
	}
	if got := rec.events[0]; !eventsEqual(got, want) {
		t.Errorf("event\n got %+v\nwant %+v", got, want)
	}

	bad := encInsert(oid, text("[1,2]"), unchanged(), text(`{}`), text("2024-01-02 03:04:05+00"), text("1"),
		text("E"), text("1"), text("a"), null(), text(id1))
	if err := d.Decode(0x120, bad, rec); err != nil {
		t.Fatal(err)
	}
	for i := range bad {
		bad[i] = 0
	}
	q := rec.quarantined[0]
	if q.Reason != "column aggregate_type is NULL" || q.LSN != 0x120 || q.CommitLSN != 0x200 || q.Table != "public.outbox" {
		t.Errorf("quarantined %+v", q)
	}
	if _, ok := q.Columns["extra"]; ok {
		t.Error("an unchanged TOAST value must be absent from the raw columns")
	}
	if v, ok := q.Columns["aggregate_type"]; !ok || !v.Null {
		t.Errorf("aggregate_type = %+v, %v; want a NULL entry", v, ok)
	}
	if v := q.Columns["headers"]; v.Null || string(v.Text) != "[1,2]" || v.Size != 5 || v.SHA256 != sha256.Sum256([]byte("[1,2]")) {
		t.Errorf("headers = %+v, want the raw text", v)
	}
	if q.EventID != id1 || q.Ordinal != 0 {
		t.Errorf("event id %q, ordinal %d; want %s, 0", q.EventID, q.Ordinal, id1)
	}
	if len(q.Columns) != 9 {
		t.Errorf("raw columns = %d, want 9", len(q.Columns))
	}
}

func TestDecodeWrapsHandlerErrors(t *testing.T) {
	stop := errors.New("stop")
	d := New(Config{})
	err := d.Decode(1, encBegin(0x200, 7), &recorder{fail: stop})
	if !errors.Is(err, stop) {
		t.Fatalf("error = %v, want it to wrap the handler's", err)
	}
}

// TestDecodeTruncatedMessages cuts every message at every length: each prefix must return a
// *ProtocolError, never panic.
func TestDecodeTruncatedMessages(t *testing.T) {
	const oid = 16385
	msgs := [][]byte{encBegin(1, 1), encCommit(1, 2), encRelation(oid, "public", "outbox", outboxColumns()...),
		encInsert(oid, outboxRow(id1, "1")...), encUpdate(oid, 'O', outboxRow(id1, "1"), outboxRow(id1, "1")),
		encDelete(oid, 'K', outboxRow(id1, "1")...), encTruncate(oid, oid+1), encOrigin(1, "o"), encType(1, "p", "t"),
		encMessage(true, 1, "p", "c")}
	for _, m := range msgs {
		for n := range len(m) {
			d := New(Config{})
			for _, f := range [][]byte{encBegin(1, 1), encRelation(oid, "public", "outbox", outboxColumns()...)} {
				if err := d.Decode(0, f, &recorder{}); err != nil {
					t.Fatal(err)
				}
			}
			var pe *ProtocolError
			if err := d.Decode(1, m[:n], &recorder{}); !errors.As(err, &pe) {
				t.Errorf("%q cut to %d bytes: error = %v, want a *ProtocolError", m[0], n, err)
			}
		}
	}
}

func eventsEqual(a, b cdc.Event) bool {
	return a.ID == b.ID && a.AggregateType == b.AggregateType && a.AggregateID == b.AggregateID &&
		a.AggregateVersion == b.AggregateVersion && a.EventType == b.EventType && a.SchemaVersion == b.SchemaVersion &&
		string(a.Payload) == string(b.Payload) && string(a.Headers) == string(b.Headers) &&
		a.OccurredAt.Equal(b.OccurredAt) && a.CommitLSN == b.CommitLSN && a.Backfill == b.Backfill &&
		a.LSN == b.LSN && a.Ordinal == b.Ordinal
}

func rawText(v cdc.RawValue) string {
	if v.Null {
		return "<NULL>"
	}
	return string(v.Text)
}
