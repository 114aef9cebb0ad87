// Package cdc holds the few core types that every stage of cdc-router shares: the WAL position (LSN) and
// the outbox event. It imports no driver or broker package, so the tracker, the routing rules and the
// decoder can all speak about positions and events without knowing PostgreSQL or RabbitMQ.
package cdc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// LSN is a PostgreSQL WAL position (pg_lsn). Zero means "no position".
type LSN uint64

// String formats the LSN the way PostgreSQL prints a pg_lsn: two hexadecimal halves, "16/B374D848".
// It is on every message's commit_lsn header, so it formats without fmt (one allocation, not three).
func (l LSN) String() string {
	var b [17]byte
	return string(appendHex(append(appendHex(b[:0], uint32(l>>32)), '/'), uint32(l)))
}

// appendHex appends v in upper-case hexadecimal without leading zeros, as %X does.
func appendHex(b []byte, v uint32) []byte {
	const digits = "0123456789ABCDEF"
	n := 1
	for x := v >> 4; x != 0; x >>= 4 {
		n++
	}
	for i := n - 1; i >= 0; i-- {
		b = append(b, digits[v>>(4*uint(i))&0xF])
	}
	return b
}

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

// ErrUnpublishable is wrapped by a publisher's error for an event that can never become a message the broker
// accepts (an AMQP limit, a reserved header, a value type the broker refuses). It is a property of the event,
// not of the broker's state: the caller quarantines the event and goes on.
var ErrUnpublishable = errors.New("event cannot be published")

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
	CommitTime       time.Time // commit time of that transaction for a streamed row (the primary's clock); zero for snapshot and backfill rows
	Table            string    // schema-qualified outbox table of the row, set by the decoder; empty: the only --table
	Backfill         bool      // read from the table by a snapshot or backfill, not from the stream
	Replayed         *Replayed // published again by `cdc-router quarantine replay`; nil otherwise

	// LSN is the WAL start of the insert that carried a streamed row (zero for snapshot and backfill rows),
	// and Ordinal its index among the transaction's inserts that share that position (a COPY or a
	// multi-row INSERT writes several rows at one position). Together they name the row stably across
	// replays of the stream.
	LSN     LSN
	Ordinal int

	// Mapped is set for an event of a table read through a --config mapping (Debezium's outbox vocabulary):
	// the message is built from it, and of the fields above only ID, AggregateType (the raw routing value),
	// AggregateID (the key), EventType, Payload, OccurredAt and the positions are set. Nil for the native shape.
	Mapped *Mapped
}

// Replayed is the quarantine record an event is published again from: the router marks its message with
// them (route/message's replay headers), never a row's own headers.
type Replayed struct {
	RecordID      int64     // the quarantine record's id
	QuarantinedAt time.Time // when the event was quarantined
}

// Mapped is the AMQP side of an event computed by a column mapping: what the native shape derives from its
// fixed columns, the mapping computes from the configured ones.
type Mapped struct {
	RoutingKey  string    // route.by.field through route.topic.regex and route.topic.replacement (or amqp.routing.key.source)
	ByExchange  bool      // amqp.topic.target=exchange: the message goes to Exchange, not to the router's exchange
	Exchange    string    // with ByExchange, the routed topic, which names the exchange
	ContentType string    // from the payload column's type, or amqp.content.type, or the row's amqp.property.content_type column
	Timestamp   time.Time // AMQP timestamp (seconds on the wire) and the timestamp_in_ms header; zero: neither
	Headers     []Header  // in configuration order; a later header of the same name wins
	Tombstone   bool      // the payload was empty under route.tombstone.on.empty.payload: the body is empty
	// Columns is the row as PostgreSQL sent it, every column of the table in order, for the quarantine record
	// of an event refused after decoding (the names of a mapped table are its own, not the native ones).
	// Nil when the event was built without its row.
	Columns []Column
	// ContentEncoding, CorrelationID, ReplyTo and AppID are the AMQP properties of the row's
	// amqp.property.<name> columns; empty: unset.
	ContentEncoding, CorrelationID, ReplyTo, AppID string
	// JSONHeaders is the row's amqp.headers.json column, a JSON object spread into headers as the native
	// headers column is (route converts it), under Headers: a header of the same name in Headers wins.
	JSONHeaders []byte
}

// Column is one column value of a mapped row as PostgreSQL sent it in text form. Bytea marks a value kept
// decoded (the payload, sharing Event.Payload): PostgreSQL's text of it is \x and its bytes in hex.
type Column struct {
	Name  string
	Null  bool
	Bytea bool
	Text  []byte
}

// Raw is the column's value as PostgreSQL prints it, bounded as every quarantined value is.
func (c Column) Raw() RawValue {
	switch {
	case c.Null:
		return NullValue()
	case c.Bytea:
		text := make([]byte, 0, 2+2*len(c.Text))
		text = append(text, `\x`...)
		return NewRawValue(hex.AppendEncode(text, c.Text))
	}
	return NewRawValue(c.Text)
}

// Header is one typed AMQP header of a mapped event. Value is a string, int16, int32, int64, bool, float64
// or []byte; a NULL column gives no Header.
type Header struct {
	Name  string
	Value any
}

// MaxStoredValue bounds what is stored of each column value of a quarantined row: 64 KiB.
const MaxStoredValue = 64 << 10

// RawValue is one column value of a quarantined row: the start of its text (a copy of at most
// MaxStoredValue bytes, exactly as PostgreSQL sent it, so possibly not valid UTF-8), its whole length and
// the SHA-256 of the whole value, so a value too large to keep can still be identified.
type RawValue struct {
	Null   bool
	Text   []byte
	Size   int64
	SHA256 [sha256.Size]byte
}

// NewRawValue keeps the bounded prefix of b (copied), its length and its digest. It never copies b whole.
func NewRawValue(b []byte) RawValue {
	return RawValue{Text: append([]byte(nil), b[:min(len(b), MaxStoredValue)]...), Size: int64(len(b)), SHA256: sha256.Sum256(b)}
}

// TextValue is NewRawValue of a string.
func TextValue(s string) RawValue { return NewRawValue([]byte(s)) }

// NullValue is a SQL NULL.
func NullValue() RawValue { return RawValue{Null: true} }

// Truncated reports whether Text holds less than the whole value.
func (v RawValue) Truncated() bool { return !v.Null && int64(len(v.Text)) < v.Size }

// Quarantined is an outbox row that cannot become an Event, or an event the broker refuses. It is stored
// with its bounded raw column values so that an operator can repair and re-publish it; it is never dropped
// silently.
type Quarantined struct {
	LSN       LSN                 // position of the change that carried the row; the read position for snapshot rows
	Ordinal   int                 // streamed rows: index among the transaction's inserts at LSN (see Event.Ordinal)
	RowKey    string              // snapshot and backfill rows: the row's key as a JSON array [type, id, version]; empty when streamed
	CommitLSN LSN                 // commit LSN of its transaction
	Table     string              // schema-qualified table name
	EventID   string              // the outbox id when the row has one (at most 255 bytes kept), else empty
	Columns   map[string]RawValue // by column name; a column that was not sent has no entry
	Reason    string              // why it cannot become an event

	// CommitTime is its transaction's commit time (the primary's clock) for a streamed row; zero when not
	// known (snapshot and backfill rows).
	CommitTime time.Time
}
