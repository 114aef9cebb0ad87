package cdc

import (
	"errors"
	"fmt"
	"testing"
)

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
	for _, l := range []LSN{0, 1, 0xF, 0x10, 0xABCDEF, 1 << 32, 0x1_0000_000A, 0xFFFF_FFFF_FFFF_FFFF, 0x8000_0000_0000_0001} {
		if got, want := l.String(), fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)); got != want {
			t.Errorf("LSN(%#x).String() = %q, want %q", uint64(l), got, want)
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

// TestBrokerFailureKeepsTheErrorAndIsMarked: the mark adds nothing to the text and hides nothing it wraps.
func TestBrokerFailureKeepsTheErrorAndIsMarked(t *testing.T) {
	inner := errors.New("connection reset")
	err := BrokerFailure(fmt.Errorf("publish: %w", inner))
	if err.Error() != "publish: connection reset" || !errors.Is(err, inner) || !errors.Is(err, ErrBroker) {
		t.Errorf("%q: is inner %v, is ErrBroker %v", err, errors.Is(err, inner), errors.Is(err, ErrBroker))
	}
	if errors.Is(inner, ErrBroker) || BrokerFailure(nil) != nil {
		t.Error("an unmarked error is a broker failure, or nil was marked")
	}
}
