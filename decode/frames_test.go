package decode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// framesDir holds WALData frames recorded from a real server by `go test -run TestDecodeFromPostgres
// -record ./decode/`, one file per XLogData named <sequence>-<message type>-<WAL start in hex>.bin.
const framesDir = "testdata/frames"

// recordedConfig is the Config the recorded transactions are decoded with.
func recordedConfig() Config {
	return Config{MaxPayloadBytes: 1024, OnDrift: OnDriftQuarantine, Check: func(ev cdc.Event) error {
		if ev.EventType == "Forbidden" {
			return errors.New("event_type Forbidden is not routable")
		}
		return nil
	}}
}

// uuidN is the recorded transactions' id number n.
func uuidN(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// checkRecorded asserts what decoding recordedTransactions gives.
func checkRecorded(t *testing.T, rec *recorder) {
	t.Helper()
	want := []string{
		"B", "E " + uuidN(1), "E " + uuidN(2), "Q 1: table public.other is in the publication but is not the outbox table public.outbox", "C",
		"B", "Q " + uuidN(3) + ": headers is not a JSON object",
		"Q " + uuidN(4) + ": payload is 2012 bytes, over the 1024-byte limit (--max-payload-bytes)", "E " + uuidN(5), "C",
		"B", "E " + uuidN(6), "C",
		"B", "Q " + uuidN(7) + ": event_type Forbidden is not routable", "C",
		"B", "E " + uuidN(8), "Q " + uuidN(9) + ": headers is not a JSON object", "E " + uuidN(10), "C",
		"B", "Q " + uuidN(11) + ": column headers is missing", "C",
		"B", "Q " + uuidN(12) + ": column aggregate_version is text, want int8, int4 or int2", "C",
		"B", "Q " + uuidN(13) + ": table public.outbox_old is in the publication but is not the outbox table public.outbox", "C",
		"B", "E " + uuidN(14), "C",
	}
	if !slices.Equal(rec.shape, want) {
		t.Fatalf("handler calls:\n got %q\nwant %q", rec.shape, want)
	}
	for i, b := range rec.begins {
		if commit, end := rec.ends[i][0], rec.ends[i][1]; b != commit || end <= commit || b == 0 {
			t.Errorf("transaction %d: Begin %s, Commit %s end %s", i, b, commit, end)
		}
	}
	byID := map[string]cdc.Event{}
	for _, ev := range rec.events {
		byID[ev.ID] = ev
		if !slices.Contains(rec.begins, ev.CommitLSN) || ev.LSN == 0 || ev.LSN >= ev.CommitLSN {
			t.Errorf("event %s: commit LSN %s, LSN %s", ev.ID, ev.CommitLSN, ev.LSN)
		}
	}
	wantEvents := []cdc.Event{
		{ID: uuidN(1), AggregateType: "order", AggregateID: "o-1", AggregateVersion: 1, EventType: "OrderPlaced",
			SchemaVersion: 1, Payload: []byte(`{"a": 1, "b": 2}`), Headers: []byte(`{"trace": "t1"}`), OccurredAt: time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)},
		{ID: uuidN(2), AggregateType: "order", AggregateID: "o-1", AggregateVersion: 2, EventType: "OrderPaid",
			SchemaVersion: 1, Payload: []byte(`[true, null]`), Headers: []byte(`{}`), OccurredAt: time.Date(2024, 1, 1, 21, 34, 5, 0, time.UTC)},
		{ID: uuidN(6), AggregateType: "customer", AggregateID: "c-1", AggregateVersion: 7, EventType: "Renamed",
			SchemaVersion: 2, Payload: []byte(`"s"`), Headers: []byte(`{}`), OccurredAt: time.Date(2030, 7, 1, 2, 59, 59, 500000000, time.UTC)},
	}
	for _, want := range wantEvents {
		got := byID[want.ID]
		want.CommitLSN, want.LSN = got.CommitLSN, got.LSN
		if !eventsEqual(got, want) {
			t.Errorf("event\n got %+v\nwant %+v", got, want)
		}
	}
	if ev := byID[uuidN(5)]; string(ev.Payload) != `{"n": 1.50}` || ev.OccurredAt.IsZero() {
		t.Errorf("event 5 = %+v", ev)
	}
	checkRecordedQuarantines(t, rec)
	checkRecordedPositions(t, rec, byID)
}

// checkRecordedQuarantines checks the raw values and names of the recorded quarantines.
func checkRecordedQuarantines(t *testing.T, rec *recorder) {
	t.Helper()
	byID := map[string]cdc.Quarantined{}
	for _, q := range rec.quarantined {
		byID[q.EventID] = q
		if q.LSN == 0 || q.LSN >= q.CommitLSN || !slices.Contains(rec.begins, q.CommitLSN) {
			t.Errorf("quarantined %s: LSN %s, commit LSN %s", q.EventID, q.LSN, q.CommitLSN)
		}
	}
	if q := byID[uuidN(3)]; string(q.Columns["headers"].Text) != "[1, 2]" || q.Table != "public.outbox" || q.CommitLSN != rec.begins[1] {
		t.Errorf("quarantined %+v", q)
	}
	if q := byID[uuidN(4)]; q.Columns["payload"].Size != 2012 || q.Columns["payload"].Truncated() {
		t.Errorf("oversized payload kept as %+v", q.Columns["payload"])
	}
	if q, ok := byID["1"]; !ok || q.Table != "public.other" || len(q.Columns) != 1 {
		t.Errorf("insert into other quarantined as %+v", q)
	}
	q11 := byID[uuidN(11)]
	if _, headers := q11.Columns["headers"]; len(q11.Columns) != 9 || headers || q11.Table != "public.outbox" { // 8 and note
		t.Errorf("insert without headers quarantined as %+v", q11)
	}
	if q := byID[uuidN(12)]; string(q.Columns["aggregate_version"].Text) != "two" {
		t.Errorf("insert with a text aggregate_version quarantined as %+v", q)
	}
	if q := byID[uuidN(13)]; q.Table != "public.outbox_old" || len(q.Columns) != 10 { // with the note column
		t.Errorf("insert into the renamed outbox quarantined as %+v", q)
	}
}

// checkRecordedPositions checks what the real server showed: the rows of a multi-row INSERT … VALUES each
// have their own WAL position, the rows of a COPY share one, and (LSN, Ordinal) names every row uniquely.
func checkRecordedPositions(t *testing.T, rec *recorder, byID map[string]cdc.Event) {
	t.Helper()
	if e1, e2 := byID[uuidN(1)], byID[uuidN(2)]; e1.LSN == e2.LSN || e1.Ordinal != 0 || e2.Ordinal != 0 {
		t.Errorf("multi-row INSERT: positions %s#%d and %s#%d, want two positions, ordinal 0", e1.LSN, e1.Ordinal, e2.LSN, e2.Ordinal)
	}
	var copyRows []string
	for _, q := range rec.quarantined {
		if q.EventID == uuidN(9) {
			copyRows = append(copyRows, fmt.Sprintf("%s#%d", q.LSN, q.Ordinal))
		}
	}
	for _, n := range []int{8, 10} {
		copyRows = append(copyRows, fmt.Sprintf("%s#%d", byID[uuidN(n)].LSN, byID[uuidN(n)].Ordinal))
	}
	at := byID[uuidN(8)].LSN
	if want := []string{fmt.Sprintf("%s#1", at), fmt.Sprintf("%s#0", at), fmt.Sprintf("%s#2", at)}; !slices.Equal(copyRows, want) {
		t.Errorf("COPY rows 9, 8, 10 at %q, want one position, ordinals 1, 0, 2 (%q)", copyRows, want)
	}
	seen := map[string]bool{}
	for _, name := range rowPositions(rec) {
		if seen[name] {
			t.Errorf("two rows at %s", name)
		}
		seen[name] = true
	}
}

// rowPositions is "LSN#Ordinal" of every Event and Quarantine, in order.
func rowPositions(rec *recorder) []string {
	var names []string
	for _, ev := range rec.events {
		names = append(names, fmt.Sprintf("%s#%d", ev.LSN, ev.Ordinal))
	}
	for _, q := range rec.quarantined {
		names = append(names, fmt.Sprintf("%s#%d", q.LSN, q.Ordinal))
	}
	return names
}

// TestDecodeRecordedFrames decodes the committed frames without a server.
func TestDecodeRecordedFrames(t *testing.T) {
	frames, err := readFrames()
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) == 0 {
		t.Fatalf("no frames in %s: record them with go test -run TestDecodeFromPostgres -record", framesDir)
	}
	rec, err := decodeFrames(recordedConfig(), frames)
	if err != nil {
		t.Fatal(err)
	}
	checkRecorded(t, rec)
}

func readFrames() ([]frame, error) {
	names, err := filepath.Glob(filepath.Join(framesDir, "*.bin"))
	if err != nil {
		return nil, err
	}
	slices.Sort(names)
	frames := make([]frame, 0, len(names))
	for _, name := range names {
		parts := strings.Split(strings.TrimSuffix(filepath.Base(name), ".bin"), "-")
		walStart, err := strconv.ParseUint(parts[len(parts)-1], 16, 64)
		if err != nil {
			return nil, fmt.Errorf("frame %s: %w", name, err)
		}
		data, err := os.ReadFile(name)
		if err != nil {
			return nil, err
		}
		frames = append(frames, frame{cdc.LSN(walStart), data})
	}
	return frames, nil
}

func writeFrames(t *testing.T, frames []frame) {
	t.Helper()
	old, _ := filepath.Glob(filepath.Join(framesDir, "*.bin"))
	for _, name := range old {
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(framesDir, 0o755); err != nil {
		t.Fatal(err)
	}
	kinds := map[byte]string{msgBegin: "begin", msgCommit: "commit", msgRelation: "relation", msgInsert: "insert",
		msgType: "type", msgOrigin: "origin", msgMessage: "message"}
	for i, f := range frames {
		name := fmt.Sprintf("%03d-%s-%016X.bin", i, kinds[f.data[0]], uint64(f.walStart))
		if err := os.WriteFile(filepath.Join(framesDir, name), f.data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d frames to %s", len(frames), framesDir)
}
