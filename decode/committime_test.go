package decode

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestCommitTime: the commit timestamp of a recorded Begin is read as the primary's wall clock (the frames
// were recorded in 2025 or later, well after PostgreSQL's epoch of 2000-01-01), and a Begin with a known
// timestamp gives exactly that time.
func TestCommitTime(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(framesDir, "000-begin-000000000194CF08.bin"))
	if err != nil {
		t.Fatal(err)
	}
	d := New(recordedConfig())
	if err := d.Decode(0x194CF08, data, &recorder{}); err != nil {
		t.Fatal(err)
	}
	if got := d.CommitTime(); got.Year() < 2024 || got.After(time.Now()) {
		t.Fatalf("commit time of a recorded Begin: %v", got)
	}

	want := time.Date(2026, 12, 1, 3, 4, 5, 123456000, time.UTC)
	micros := uint64(want.Sub(pgEpoch) / time.Microsecond)
	begin := []byte{'B', 0, 0, 0, 0, 0, 0, 0, 9}
	for i := 7; i >= 0; i-- {
		begin = append(begin, byte(micros>>(8*i)))
	}
	begin = append(begin, 0, 0, 0, 42) // xid
	d = New(recordedConfig())
	if err := d.Decode(9, begin, &recorder{}); err != nil {
		t.Fatal(err)
	}
	if got := d.CommitTime(); !got.Equal(want) {
		t.Fatalf("commit time %v, want %v", got, want)
	}
}
