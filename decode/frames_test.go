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
	return Config{MaxPayloadBytes: 1024, Check: func(ev cdc.Event) error {
		if ev.EventType == "Forbidden" {
			return errors.New("event_type Forbidden is not routable")
		}
		return nil
	}}
}

// checkRecorded asserts what decoding recordedTransactions gives.
func checkRecorded(t *testing.T, rec *recorder) {
	t.Helper()
	want := []string{
		"B", "E 00000000-0000-4000-8000-000000000001", "E 00000000-0000-4000-8000-000000000002", "C",
		"B", "Q 00000000-0000-4000-8000-000000000003: headers is not a JSON object",
		"Q 00000000-0000-4000-8000-000000000004: payload is 2012 bytes, over the 1024-byte limit (--max-payload-bytes)",
		"E 00000000-0000-4000-8000-000000000005", "C",
		"B", "E 00000000-0000-4000-8000-000000000006", "C",
		"B", "Q 00000000-0000-4000-8000-000000000007: event_type Forbidden is not routable", "C",
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
		byID[ev.ID[len(ev.ID)-1:]] = ev
		if !slices.Contains(rec.begins, ev.CommitLSN) {
			t.Errorf("event %s: commit LSN %s is no transaction's", ev.ID, ev.CommitLSN)
		}
	}
	wantEvents := []cdc.Event{
		{ID: "00000000-0000-4000-8000-000000000001", AggregateType: "order", AggregateID: "o-1", AggregateVersion: 1, EventType: "OrderPlaced",
			SchemaVersion: 1, Payload: []byte(`{"a": 1, "b": 2}`), Headers: []byte(`{"trace": "t1"}`), OccurredAt: time.Date(2024, 1, 2, 3, 4, 5, 123456000, time.UTC)},
		{ID: "00000000-0000-4000-8000-000000000002", AggregateType: "order", AggregateID: "o-1", AggregateVersion: 2, EventType: "OrderPaid",
			SchemaVersion: 1, Payload: []byte(`[true, null]`), Headers: []byte(`{}`), OccurredAt: time.Date(2024, 1, 1, 21, 34, 5, 0, time.UTC)},
		{ID: "00000000-0000-4000-8000-000000000006", AggregateType: "customer", AggregateID: "c-1", AggregateVersion: 7, EventType: "Renamed",
			SchemaVersion: 2, Payload: []byte(`"s"`), Headers: []byte(`{}`), OccurredAt: time.Date(2030, 7, 1, 2, 59, 59, 500000000, time.UTC)},
	}
	for _, want := range wantEvents {
		got := byID[want.ID[len(want.ID)-1:]]
		want.CommitLSN = got.CommitLSN
		if !eventsEqual(got, want) {
			t.Errorf("event\n got %+v\nwant %+v", got, want)
		}
	}
	if ev := byID["5"]; string(ev.Payload) != `{"n": 1.50}` || ev.OccurredAt.IsZero() {
		t.Errorf("event 5 = %+v", ev)
	}
	q := rec.quarantined[0]
	if h := q.Columns["headers"]; h == nil || *h != "[1, 2]" || q.Table != "public.outbox" || q.LSN == 0 || q.CommitLSN != rec.begins[1] {
		t.Errorf("quarantined %+v", q)
	}
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
