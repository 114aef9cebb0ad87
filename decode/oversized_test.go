package decode

import (
	"errors"
	"strings"
	"testing"
)

// TestOversizedMessagesAreQuarantinedFromTheirHeader: a message with the prefix whose content the stream's
// reader discarded unread is quarantined in its place, with its key, its size in the reason and no content;
// a non-transactional one keeps the non-transactional reason (it is aggregated by that); a transactional one
// outside a transaction is a protocol error, as a whole one is.
func TestOversizedMessagesAreQuarantinedFromTheirHeader(t *testing.T) {
	d, rec := New(Config{MessagePrefix: "p"}), &recorder{}
	size := int64(d.MessageLimit()) + 1
	if err := d.Decode(0x100, encBegin(0x200, 7), rec); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(0x110, encMessage(true, 0x110, "p", `{"id": "a"}`), rec); err != nil {
		t.Fatal(err)
	}
	if err := d.Oversized(0x110, true, size, rec); err != nil {
		t.Fatal(err)
	}
	if err := d.Decode(0x230, encCommit(0x200, 0x230), rec); err != nil {
		t.Fatal(err)
	}
	if err := d.Oversized(0x240, false, size, rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.quarantined) != 3 {
		t.Fatalf("%v", rec.log)
	}
	in, out := rec.quarantined[1], rec.quarantined[2]
	if in.LSN != 0x110 || in.Ordinal != 1 || in.CommitLSN != 0x200 || in.Table != MessageTable+"p" || in.Columns != nil ||
		in.EventID != "" || !strings.Contains(in.Reason, "discarded unread") || !strings.Contains(in.Reason, "bytes, over the") {
		t.Errorf("transactional: %+v", in)
	}
	if out.LSN != 0x240 || out.CommitLSN != 0 || out.Columns != nil || !strings.HasPrefix(out.Reason, NonTransactionalReason) ||
		!strings.Contains(out.Reason, "discarded unread") {
		t.Errorf("non-transactional: %+v", out)
	}
	var pe *ProtocolError
	if err := d.Oversized(0x250, true, size, rec); !errors.As(err, &pe) {
		t.Errorf("transactional outside a transaction: %v, want a ProtocolError", err)
	}
}
