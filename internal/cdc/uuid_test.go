package cdc

import "testing"

// TestIsUUID: the hyphenated form in either case is a uuid, as text and as bytes; nothing else is.
func TestIsUUID(t *testing.T) {
	for s, want := range map[string]bool{
		"0b9e7c7a-3f1e-4d2b-9a55-0123456789ab": true, "0B9E7C7A-3F1E-4D2B-9A55-0123456789AB": true,
		"0b9e7c7a3f1e4d2b9a550123456789ab": false, "0b9e7c7a-3f1e-4d2b-9a55-0123456789ag": false, "": false,
		"0b9e7c7a-3f1e-4d2b-9a55_0123456789ab": false, "{0b9e7c7a-3f1e-4d2b-9a55-0123456789a}": false,
	} {
		if IsUUID(s) != want || IsUUID([]byte(s)) != want {
			t.Errorf("IsUUID(%q) = %v, want %v", s, !want, want)
		}
	}
}
