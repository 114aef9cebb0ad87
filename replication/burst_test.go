package replication

import (
	"testing"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// TestBurstKind: the records aggregated are those of messages anyone can emit, by their reason: every
// non-transactional message, and an emitted message that fails authentication (whether the decoder prefixes
// the reason with "message: " or not); a malformed envelope, a row and a refused event are recorded one by one.
func TestBurstKind(t *testing.T) {
	msg := decode.MessageTable + "cdc-router.outbox"
	for _, tc := range []struct {
		table, reason string
		aggregated    bool
	}{
		{msg, decode.NonTransactionalReason, true},
		{msg, decode.NonTransactionalReason + "; the message is 99 bytes, over the limit", true},
		{msg, "message: unauthenticated emitted message: no MAC", true},
		{msg, "unauthenticated emitted message: the MAC does not match", true},
		{msg, "message: the content is not a JSON object: x", false},
		{"public.outbox", decode.NonTransactionalReason, false},
		{"public.outbox", "aggregate_id is NULL", false},
	} {
		if got := burstKind(cdc.Quarantined{Table: tc.table, Reason: tc.reason}) != ""; got != tc.aggregated {
			t.Errorf("%s: %q: aggregated %v, want %v", tc.table, tc.reason, got, tc.aggregated)
		}
	}
}
