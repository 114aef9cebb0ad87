package inbox

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// ErrMalformed marks an event or a delivery that lacks what the inbox needs (an id, an aggregate, a
// positive version). Redelivery cannot fix it; it is recorded in the failed table.
var ErrMalformed = errors.New("malformed event")

// Event is one outbox event as a consumer receives it. It carries no broker type: DecodeDelivery fills
// it from a RabbitMQ delivery, and parked events are read back into it from the parked table.
type Event struct {
	ID               string            // event id (uuid text): the AMQP message_id
	AggregateType    string            // aggregate_type header
	AggregateID      string            // aggregate_id header
	AggregateVersion int64             // aggregate_version header; versions of one aggregate are 1, 2, 3, ...
	Type             string            // event_type: the AMQP type property
	SchemaVersion    int32             // schema_version header
	CommitLSN        uint64            // commit_lsn header as a pg_lsn integer; 0 when absent
	Backfill         bool              // x-backfill header: read by a snapshot or backfill, not the stream
	Payload          []byte            // message body (JSON), unchanged
	Headers          map[string]string // the other AMQP headers, values in text form

	// FullState is the full_state header: the payload is the aggregate's whole state at this version,
	// not a change. The inbox applies it even across a gap, and the handler must replace the
	// projection's state with it, not add to it. Versions it skips are Stale when they arrive.
	FullState bool
}

// Validate reports, wrapping ErrMalformed, what the event lacks to be processed.
func (e Event) Validate() error {
	switch {
	case e.ID == "":
		return fmt.Errorf("%w: no event id (message_id)", ErrMalformed)
	case e.AggregateType == "" || e.AggregateID == "":
		return fmt.Errorf("%w: event %s has no aggregate_type or aggregate_id", ErrMalformed, e.ID)
	case e.AggregateVersion < 1:
		return fmt.Errorf("%w: event %s has aggregate_version %d, want >= 1", ErrMalformed, e.ID, e.AggregateVersion)
	}
	return nil
}

// Fingerprint is the SHA-256 of what makes the event this event: its aggregate, version, type, schema
// version, payload bytes and, when set, the full-state mark. Transport details (commit LSN, backfill flag, other headers) are left out,
// so a snapshot or replayed copy of an event has the same fingerprint as the original. The payload is
// compared byte for byte: the router passes the outbox column through unchanged.
func (e Event) Fingerprint() []byte {
	h := sha256.New()
	field := func(b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	var num [8]byte
	field([]byte(e.AggregateType))
	field([]byte(e.AggregateID))
	binary.BigEndian.PutUint64(num[:], uint64(e.AggregateVersion))
	field(num[:])
	field([]byte(e.Type))
	binary.BigEndian.PutUint64(num[:], uint64(e.SchemaVersion))
	field(num[:])
	field(e.Payload)
	if e.FullState { // only when set, so that deltas keep the fingerprints stored before this mark existed
		field([]byte(fullStateMark))
	}
	return h.Sum(nil)
}

// fullStateMark is hashed into the fingerprint of a full-state event. It is the header's name
// (full_state) and must never change: fingerprints are stored.
const fullStateMark = "full_state"
