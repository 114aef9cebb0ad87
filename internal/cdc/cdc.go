// Package cdc holds the few core types that every stage of cdc-router shares: the WAL position (LSN) and
// the outbox event. It imports no driver or broker package, so the tracker, the routing rules and the
// decoder can all speak about positions and events without knowing PostgreSQL or RabbitMQ.
package cdc

import (
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// LSN is a PostgreSQL WAL position (pg_lsn). Zero means "no position".
type LSN uint64

// String formats the LSN the way PostgreSQL prints a pg_lsn: two hexadecimal halves, "16/B374D848".
func (l LSN) String() string { return fmt.Sprintf("%X/%X", uint32(l>>32), uint32(l)) }

// LogValue makes slog print an LSN in PostgreSQL's form in every handler, JSON included.
func (l LSN) LogValue() slog.Value { return slog.StringValue(l.String()) }

// ParseLSN reads a pg_lsn in PostgreSQL's text form.
func ParseLSN(s string) (LSN, error) {
	hi, lo, ok := strings.Cut(strings.TrimSpace(s), "/")
	if !ok {
		return 0, fmt.Errorf("parse LSN %q: want the form XXX/XXX", s)
	}
	h, err := strconv.ParseUint(hi, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	l, err := strconv.ParseUint(lo, 16, 32)
	if err != nil {
		return 0, fmt.Errorf("parse LSN %q: %w", s, err)
	}
	return LSN(h<<32 | l), nil
}

// Event is one committed outbox row, ready to be routed. It carries no driver type: the payload and the
// headers are the column values as PostgreSQL sent them.
type Event struct {
	ID               string    // outbox id (uuid text); becomes the AMQP message_id
	AggregateType    string    // aggregate_type
	AggregateID      string    // aggregate_id
	AggregateVersion int64     // aggregate_version
	EventType        string    // event_type
	SchemaVersion    int32     // schema_version
	Payload          []byte    // payload column (JSON text), passed through unchanged
	Headers          []byte    // headers column (a JSON object as text); may be empty
	OccurredAt       time.Time // occurred_at
	CommitLSN        LSN       // commit LSN of the transaction that inserted the row (or the snapshot position)
	Backfill         bool      // read from the table by a snapshot or backfill, not from the stream
}

// Quarantined is an outbox row that cannot become an Event. It is stored with its raw column values so that
// an operator can repair and re-insert it; it is never dropped silently.
type Quarantined struct {
	LSN       LSN                // position of the change that carried the row
	CommitLSN LSN                // commit LSN of its transaction
	Table     string             // schema-qualified table name
	Columns   map[string]*string // raw text values by column name; nil for SQL NULL
	Reason    string             // why it cannot become an event
}
