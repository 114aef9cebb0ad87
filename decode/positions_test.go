package decode

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestRowPositionsFromPostgres shows, against a real server, which statements write several outbox rows
// at one WAL position and that (LSN, Ordinal) still names every row once: a COPY writes its rows with heap
// multi-inserts, one WAL record (one position) per filled page; INSERT … VALUES (…),(…) and
// INSERT … SELECT write one record per row.
func TestRowPositionsFromPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var copyData strings.Builder
	for i := range 1000 {
		headers := "{}"
		if i%100 == 7 {
			headers = "[1]" // valid jsonb, not an object: quarantined
		}
		fmt.Fprintf(&copyData, "%s\torder\to-%d\t1\tOrderPlaced\t{\"n\": %d}\t%s\t2024-01-02 03:04:05+00\n", uuidN(100+i), i, i, headers)
	}
	txs := []recordedTx{
		{sql: `COPY outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers, occurred_at) FROM STDIN`,
			copy: copyData.String()},
		{sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
		  SELECT ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid, 'select', 's', n, 'E', '{}' FROM generate_series(1, 3) n`},
		{sql: `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload) VALUES
		  ('00000000-0000-4000-8000-000000000011', 'values', 'v', 1, 'E', '{}'),
		  ('00000000-0000-4000-8000-000000000012', 'values', 'v', 2, 'E', '{}'),
		  ('00000000-0000-4000-8000-000000000013', 'values', 'v', 3, 'E', '{}')`},
	}
	repl := streamFromPostgres(ctx, t, txs)
	_, rec := streamTransactions(ctx, t, repl, Config{}, len(txs))
	repl.Close(ctx)

	if len(rec.events) != 996 || len(rec.quarantined) != 10 {
		t.Fatalf("%d events and %d quarantined, want 996 and 10", len(rec.events), len(rec.quarantined))
	}
	// commit LSN → position → the ordinals of the events and quarantines there, which share one numbering
	perTxn := map[cdc.LSN]map[cdc.LSN][]int{}
	add := func(commit, at cdc.LSN, ordinal int) {
		if perTxn[commit] == nil {
			perTxn[commit] = map[cdc.LSN][]int{}
		}
		perTxn[commit][at] = append(perTxn[commit][at], ordinal)
	}
	for _, ev := range rec.events {
		add(ev.CommitLSN, ev.LSN, ev.Ordinal)
	}
	for _, q := range rec.quarantined {
		add(q.CommitLSN, q.LSN, q.Ordinal)
	}
	want := map[cdc.LSN]string{rec.begins[0]: "COPY of 1000 rows", rec.begins[1]: "INSERT … SELECT of 3 rows",
		rec.begins[2]: "INSERT … VALUES of 3 rows"}
	for commit, what := range want {
		positions, most := perTxn[commit], 0
		for at, ordinals := range positions {
			most = max(most, len(ordinals))
			seen := make([]bool, len(ordinals))
			for _, o := range ordinals {
				if o < 0 || o >= len(ordinals) || seen[o] {
					t.Errorf("%s: ordinals %v at %s are not 0…%d once each", what, ordinals, at, len(ordinals)-1)
					break
				}
				seen[o] = true
			}
		}
		t.Logf("%s: %d WAL positions, at most %d rows at one", what, len(positions), most)
		if commit == rec.begins[0] && (len(positions) < 2 || most < 2) || commit != rec.begins[0] && most != 1 {
			t.Errorf("%s: %d positions, at most %d rows at one", what, len(positions), most)
		}
	}
}

func TestDecodeOrdinals(t *testing.T) {
	const oid = 16385
	bad := withColumn(outboxRow(id1, "1"), colHeaders, text("[1]"))
	ins := func(at cdc.LSN, row []tv) frame { return frame{at, encInsert(oid, row...)} }
	frames := []frame{{0x100, encBegin(0x200, 7)}, {0, encRelation(oid, "public", "outbox", outboxColumns()...)},
		ins(0x110, outboxRow(id1, "1")), ins(0x110, bad), ins(0x110, outboxRow(id1, "2")), // a COPY's multi-insert
		ins(0x150, outboxRow(id1, "3")), ins(0x160, outboxRow(id1, "4")), ins(0x160, outboxRow(id1, "5")),
		{0x230, encCommit(0x200, 0x230)},
		{0x300, encBegin(0x400, 8)}, ins(0x160, outboxRow(id1, "6")), ins(0x160, bad), {0x430, encCommit(0x400, 0x430)},
	}
	want := []string{"0/110#0", "0/110#2", "0/150#0", "0/160#0", "0/160#1", "0/160#0", // events
		"0/110#1", "0/160#1"} // quarantines: their ordinal counts every insert at the position
	for replay := range 2 { // a replay of the same stream names the rows the same way
		rec, err := decodeFrames(Config{}, frames)
		if err != nil {
			t.Fatal(err)
		}
		if got := rowPositions(rec); !slices.Equal(got, want) {
			t.Errorf("replay %d: positions %q, want %q", replay, got, want)
		}
	}
}
