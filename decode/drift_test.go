package decode

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// withoutColumn returns the outbox columns and a valid row without column i.
func withoutColumn(i int) ([]string, []tv) {
	return slices.Delete(outboxColumns(), i, i+1), slices.Delete(outboxRow(id1, "1"), i, i+1)
}

// outboxTypes is the canonical type OIDs of outboxColumns, with the given changes.
func outboxTypes(changes map[int]uint32) []uint32 {
	types := make([]uint32, numColumns)
	for c := range types {
		types[c] = acceptedTypes(c)[0]
		if oid, ok := changes[c]; ok {
			types[c] = oid
		}
	}
	return types
}

func TestDecodeDrift(t *testing.T) {
	const oid, other = 16385, 16400
	noHeaders, noHeadersRow := withoutColumn(colHeaders)
	noID, noIDRow := withoutColumn(colID)
	tests := []struct {
		name      string
		cfg       Config
		relation  []byte // announces oid (or other, for the insert)
		insertOID uint32
		row       []tv
		table     string // the DriftError's Table and the Quarantined's
		problem   string
		fix       []string // in the DriftError's text
		eventID   string
	}{
		{name: "missing headers", relation: encRelation(oid, "public", "outbox", noHeaders...), row: noHeadersRow,
			table: "public.outbox", problem: "column headers is missing", eventID: id1,
			fix: []string{`restore the column (ALTER TABLE "public"."outbox" ADD COLUMN headers jsonb NOT NULL DEFAULT '{}')`,
				"start once with --on-drift=quarantine", "the table definition of their time"}},
		{name: "missing id", relation: encRelation(oid, "public", "outbox", noID...), row: noIDRow,
			table: "public.outbox", problem: "column id is missing", fix: []string{"ADD COLUMN id uuid)"}},
		{name: "changed type", relation: encRelationTypes(oid, "public", "outbox", outboxColumns(), outboxTypes(map[int]uint32{colAggregateVersion: oidText})),
			row: outboxRow(id1, "1"), table: "public.outbox", problem: "column aggregate_version is text, want int8, int4 or int2", eventID: id1,
			fix: []string{"ALTER COLUMN aggregate_version TYPE int8 USING aggregate_version::int8"}},
		{name: "two problems", relation: encRelationTypes(oid, "public", "outbox", noHeaders, slices.Delete(outboxTypes(map[int]uint32{colPayload: 17}), colHeaders, colHeaders+1)),
			row: noHeadersRow, table: "public.outbox", problem: "column payload is bytea, want jsonb or json; column headers is missing", eventID: id1,
			fix: []string{"restore the columns (ALTER TABLE \"public\".\"outbox\" ALTER COLUMN payload TYPE jsonb USING payload::jsonb, ADD COLUMN headers"}},
		{name: "type announced by a Type message", relation: append(encType(70000, "public", "citext"),
			encRelationTypes(oid, "public", "outbox", outboxColumns(), outboxTypes(map[int]uint32{colAggregateType: 70000}))...),
			row: outboxRow(id1, "1"), table: "public.outbox", problem: "column aggregate_type is public.citext, want text or varchar", eventID: id1},
		{name: "unknown type", relation: encRelationTypes(oid, "public", "outbox", outboxColumns(), outboxTypes(map[int]uint32{colOccurredAt: 1114 + 70000})),
			row: outboxRow(id1, "1"), table: "public.outbox", problem: "column occurred_at is type OID 71114, want timestamptz", eventID: id1},
		{name: "renamed outbox", relation: encRelation(oid, "public", "outbox_old", outboxColumns()...), row: outboxRow(id1, "1"),
			table: "public.outbox_old", problem: "table public.outbox_old is in the publication but is not the outbox table public.outbox", eventID: id1,
			fix: []string{"start with --table public.outbox_old (or rename it back and start once with --on-drift=quarantine",
				`ALTER PUBLICATION <publication> DROP TABLE "public"."outbox_old"`}},
		{name: "other table", cfg: Config{Publication: "CDC"}, relation: encRelation(other, "public", "orders", "id", "total"), insertOID: other,
			row: []tv{text("1"), text("12.5")}, table: "public.orders", eventID: "1",
			problem: "table public.orders is in the publication but is not the outbox table public.outbox",
			fix:     []string{`ALTER PUBLICATION "CDC" DROP TABLE "public"."orders"`, `recreate a FOR ALL TABLES publication as FOR TABLE "public"."outbox"`}},
		{name: "outbox name in another schema", relation: encRelation(other, "audit", "outbox", outboxColumns()...), insertOID: other,
			row: outboxRow(id1, "1"), table: "audit.outbox", eventID: id1,
			problem: "table audit.outbox is in the publication but is not the outbox table public.outbox"},
	}
	for _, tt := range tests {
		insertOID := orOID(tt.insertOID, oid)
		frames := []frame{{0x100, encBegin(0x200, 7)}, {0, encRelation(oid, "public", "outbox", outboxColumns()...)},
			{0x110, encInsert(oid, outboxRow(id2, "1")...)}}
		for _, m := range splitMessages(tt.relation) {
			frames = append(frames, frame{0, m})
		}
		frames = append(frames, frame{0x150, encInsert(insertOID, tt.row...)}, frame{0x150, encInsert(insertOID, tt.row...)},
			frame{0x230, encCommit(0x200, 0x230)})
		t.Run(tt.name+"/refuse", func(t *testing.T) {
			rec, err := decodeFrames(tt.cfg, frames)
			var de *DriftError
			if !errors.As(err, &de) {
				t.Fatalf("error = %v, want a *DriftError", err)
			}
			if de.Table != tt.table || de.LSN != 0x150 || de.Problem != tt.problem {
				t.Errorf("DriftError{Table: %q, LSN: %s, Problem: %q}, want %q, 0/150, %q", de.Table, de.LSN, de.Problem, tt.table, tt.problem)
			}
			for _, want := range append(tt.fix, "decode: refusing the insert at 0/150 into "+tt.table+" because "+tt.problem+": ") {
				if !strings.Contains(de.Error(), want) {
					t.Errorf("error text\n%s\ndoes not contain %q", de.Error(), want)
				}
			}
			if want := []string{"B", "E " + id2}; !slices.Equal(rec.shape, want) { // nothing of the refused row
				t.Errorf("handler calls %q, want %q", rec.shape, want)
			}
		})
		t.Run(tt.name+"/quarantine", func(t *testing.T) {
			cfg := tt.cfg
			cfg.OnDrift = OnDriftQuarantine
			rec, err := decodeFrames(cfg, frames)
			if err != nil {
				t.Fatal(err)
			}
			if want := []string{"B", "E " + id2, "Q " + tt.eventID + ": " + tt.problem, "Q " + tt.eventID + ": " + tt.problem, "C"}; !slices.Equal(rec.shape, want) {
				t.Errorf("handler calls %q, want %q", rec.shape, want)
			}
			if len(rec.quarantined) != 2 {
				t.Fatalf("%d quarantined, want 2", len(rec.quarantined))
			}
			for i, q := range rec.quarantined {
				if q.Table != tt.table || q.LSN != 0x150 || q.Ordinal != i || q.CommitLSN != 0x200 || q.EventID != tt.eventID ||
					q.Reason != tt.problem || len(q.Columns) != len(tt.row) {
					t.Errorf("quarantined %+v", q)
				}
			}
		})
	}
}

func orOID(a, b uint32) uint32 {
	if a != 0 {
		return a
	}
	return b
}

// splitMessages splits a concatenation of a Type and a Relation message built by the encoders.
func splitMessages(b []byte) [][]byte {
	if b[0] != msgType {
		return [][]byte{b}
	}
	r := &reader{buf: b[1:]}
	r.u32("")
	r.cstring("")
	r.cstring("")
	n := len(b) - len(r.buf)
	return [][]byte{b[:n], b[n:]}
}

func TestDecodeRelationsAloneNeverFail(t *testing.T) {
	const oid, other = 16385, 16400
	noHeaders, _ := withoutColumn(colHeaders)
	accepted := outboxTypes(map[int]uint32{colAggregateType: oidVarchar, colAggregateID: oidVarchar, colEventType: oidVarchar,
		colAggregateVersion: oidInt2, colSchemaVersion: oidInt2, colPayload: oidJSON, colHeaders: oidJSON})
	frames := []frame{{0x100, encBegin(0x200, 7)},
		{0, encRelation(other, "public", "orders", "id")}, // in the publication, never inserted into
		{0, encRelation(oid, "public", "outbox", noHeaders...)},
		{0, encRelationTypes(oid, "public", "outbox", outboxColumns(), accepted)}, // fixed before any insert
		{0x110, encInsert(oid, withColumn(outboxRow(id1, "1"), colHeaders, null())...)}, {0x230, encCommit(0x200, 0x230)}}
	rec, err := decodeFrames(Config{}, frames)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.events) != 1 || rec.events[0].Headers != nil {
		t.Errorf("events %+v, want one without headers (NULL headers still mean none)", rec.events)
	}
}

func TestConfigValidateOnDrift(t *testing.T) {
	for _, v := range []string{"", OnDriftRefuse, OnDriftQuarantine} {
		if err := (Config{OnDrift: v}).Validate(); err != nil {
			t.Errorf("OnDrift %q: %v", v, err)
		}
	}
	if err := (Config{OnDrift: "ignore"}).Validate(); err == nil || !strings.Contains(err.Error(), `on-drift "ignore" must be "refuse" or "quarantine"`) {
		t.Errorf("OnDrift ignore: %v", err)
	}
	if c := (Config{}).withDefaults(); c.OnDrift != OnDriftRefuse {
		t.Errorf("default OnDrift = %q", c.OnDrift)
	}
}

// TestDecodeRecordedFramesRefuse decodes the recorded frames with the default OnDrift: the insert into the
// table "other", in the publication, is refused before the Handler sees it.
func TestDecodeRecordedFramesRefuse(t *testing.T) {
	frames, err := readFrames()
	if err != nil {
		t.Fatal(err)
	}
	cfg := recordedConfig()
	cfg.OnDrift = ""
	rec, err := decodeFrames(cfg, frames)
	var de *DriftError
	if !errors.As(err, &de) || de.Table != "public.other" || de.LSN != frames[5].walStart || frames[5].data[0] != msgInsert {
		t.Fatalf("error = %v, want a *DriftError for public.other at %s", err, frames[5].walStart)
	}
	if want := []string{"B", "E " + uuidN(1), "E " + uuidN(2)}; !slices.Equal(rec.shape, want) {
		t.Errorf("handler calls %q, want %q", rec.shape, want)
	}
}
