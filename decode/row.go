package decode

import (
	"strings"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// The outbox columns, by position in fields.
const (
	colID = iota
	colAggregateType
	colAggregateID
	colAggregateVersion
	colEventType
	colSchemaVersion
	colPayload
	colHeaders
	colOccurredAt
	numColumns
)

// columnName is the outbox column name for a col* constant.
func columnName(c int) string {
	switch c {
	case colID:
		return "id"
	case colAggregateType:
		return "aggregate_type"
	case colAggregateID:
		return "aggregate_id"
	case colAggregateVersion:
		return "aggregate_version"
	case colEventType:
		return "event_type"
	case colSchemaVersion:
		return "schema_version"
	case colPayload:
		return "payload"
	case colHeaders:
		return "headers"
	case colOccurredAt:
		return "occurred_at"
	}
	return ""
}

// columnByName is the col* constant for an outbox column name.
func columnByName(name string) (int, bool) {
	for c := range numColumns {
		if columnName(c) == name {
			return c, true
		}
	}
	return 0, false
}

// RowError is why an outbox row cannot become an event (pgtext.RowError, which decode/mapping returns
// too). The row is quarantined, never dropped.
type RowError = pgtext.RowError

type valueState uint8

const (
	stateAbsent valueState = iota // no such column, or an unchanged TOASTed value
	stateNull
	stateText
)

// field is one outbox column's value; text may alias a buffer the caller reuses.
type field struct {
	state valueState
	text  []byte
}

type fields [numColumns]field

// MapRow maps one outbox row, given as column text by name (nil for NULL; a missing key is an absent
// column), to an event, applying the same rules as Decode and cfg's defaults. Extra columns are ignored.
// It is for rows read with SELECT, so the caller sets CommitLSN and Backfill; values must be in the text
// forms the replication connection pins (DateStyle=ISO, TimeZone=UTC). A row that cannot become an event
// returns a *RowError.
func MapRow(cfg Config, values map[string]*string) (cdc.Event, error) {
	cfg = cfg.withDefaults()
	var f fields
	for c := range f {
		v, ok := values[columnName(c)]
		switch {
		case !ok:
		case v == nil:
			f[c].state = stateNull
		default:
			f[c] = field{state: stateText, text: []byte(*v)}
		}
	}
	ev, err := mapFields(&cfg, &f, 0, false)
	if err != nil {
		return cdc.Event{}, err
	}
	return ev, nil
}

// mapFields applies the row rules in column order, then cfg.Check. Every column but headers is required.
// A payload over cfg.MaxPayloadBytes, or another value over the larger of that and DefaultMaxPayloadBytes,
// is refused from its length alone, before any rule reads it; the other rules copy or convert at most a
// bounded prefix. The event's strings and byte slices are copies. With pgJSON, PostgreSQL has already
// checked the payload and headers as JSON (they come from columns of type json or jsonb, as in the stream,
// where drift catches any other type), so they are not parsed again: that was a tenth of the router's CPU
// per event in the drain.
func mapFields(cfg *Config, f *fields, commitLSN cdc.LSN, pgJSON bool) (cdc.Event, *RowError) {
	for c := range f {
		switch {
		case c == colHeaders:
		case f[c].state == stateAbsent:
			return cdc.Event{}, pgtext.RowErrorf("column %s is missing", columnName(c))
		case f[c].state == stateNull:
			return cdc.Event{}, pgtext.RowErrorf("column %s is NULL", columnName(c))
		}
	}
	if n := len(f[colPayload].text); n > cfg.MaxPayloadBytes {
		return cdc.Event{}, pgtext.RowErrorf("payload is %d bytes, over the %d-byte limit (--max-payload-bytes)", n, cfg.MaxPayloadBytes)
	}
	limit := max(cfg.MaxPayloadBytes, DefaultMaxPayloadBytes)
	for c := range f {
		if c != colPayload && len(f[c].text) > limit {
			return cdc.Event{}, pgtext.RowErrorf("%s is %d bytes, over the %d-byte limit of a column other than the payload",
				columnName(c), len(f[c].text), limit)
		}
	}
	if id := f[colID].text; !cdc.IsUUID(id) {
		return cdc.Event{}, pgtext.RowErrorf("id %s is not a uuid", pgtext.Quote(id))
	}
	version, err := parseIntColumn(f, colAggregateVersion, 64)
	if err != nil {
		return cdc.Event{}, err
	}
	schemaVersion, err := parseIntColumn(f, colSchemaVersion, 32)
	if err != nil {
		return cdc.Event{}, err
	}
	payload := f[colPayload].text
	if !pgJSON && !pgtext.IsJSON(payload) {
		return cdc.Event{}, pgtext.RowErrorf("payload is not valid JSON")
	}
	headers := f[colHeaders].text
	if f[colHeaders].state == stateText && !(pgJSON && pgtext.StartsObject(headers) || pgtext.IsJSONObject(headers)) {
		return cdc.Event{}, pgtext.RowErrorf("headers is not a JSON object")
	}
	occurredAt, ok := pgtext.ParseTimestamptz(f[colOccurredAt].text)
	if !ok {
		return cdc.Event{}, pgtext.RowErrorf("occurred_at %s is not a timestamptz like 2006-01-02 15:04:05.999999+00", pgtext.Quote(f[colOccurredAt].text))
	}
	// Two allocations instead of six: the four strings share one, the payload and the headers another.
	id, aggType, aggID, eventType := f[colID].text, f[colAggregateType].text, f[colAggregateID].text, f[colEventType].text
	var sb strings.Builder
	sb.Grow(len(id) + len(aggType) + len(aggID) + len(eventType))
	for _, b := range [][]byte{id, aggType, aggID, eventType} {
		sb.Write(b)
	}
	str := sb.String()
	a, b, c := len(id), len(id)+len(aggType), len(id)+len(aggType)+len(aggID)
	bodies := append(append(make([]byte, 0, len(payload)+len(headers)), payload...), headers...)
	ev := cdc.Event{
		ID:               str[:a],
		AggregateType:    str[a:b],
		AggregateID:      str[b:c],
		AggregateVersion: version,
		EventType:        str[c:],
		SchemaVersion:    int32(schemaVersion),
		Payload:          bodies[:len(payload):len(payload)],
		OccurredAt:       occurredAt,
		CommitLSN:        commitLSN,
	}
	if len(headers) > 0 {
		ev.Headers = bodies[len(payload):]
	}
	if cfg.Check != nil {
		if err := cfg.Check(ev); err != nil {
			return cdc.Event{}, pgtext.CheckFailed(err)
		}
	}
	return ev, nil
}

func parseIntColumn(f *fields, c int, bits uint) (int64, *RowError) {
	text := f[c].text
	n, status := pgtext.ParseInt(text, bits)
	switch status {
	case pgtext.IntSyntax:
		return 0, pgtext.RowErrorf("%s %s is not an integer", columnName(c), pgtext.Quote(text))
	case pgtext.IntRange:
		return 0, pgtext.RowErrorf("%s %s is out of the int%d range", columnName(c), pgtext.Quote(text), bits)
	}
	return n, nil
}
