package cdc

import "testing"

func TestLSNRoundTrip(t *testing.T) {
	for _, s := range []string{"0/0", "0/16B3748", "16/B374D848", "FFFFFFFF/FFFFFFFF"} {
		l, err := ParseLSN(s)
		if err != nil {
			t.Fatalf("ParseLSN(%q): %v", s, err)
		}
		if got := l.String(); got != s {
			t.Errorf("ParseLSN(%q).String() = %q", s, got)
		}
	}
	if l, _ := ParseLSN("1/0"); l != 1<<32 {
		t.Errorf("1/0 = %d, want %d", l, uint64(1)<<32)
	}
	for _, bad := range []string{"", "12", "x/1", "1/x", "100000000/0"} {
		if _, err := ParseLSN(bad); err == nil {
			t.Errorf("ParseLSN(%q) accepted", bad)
		}
	}
}
