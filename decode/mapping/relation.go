package mapping

import (
	"time"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Limits are the bounds and the check a row is mapped under (decode.Config's).
type Limits struct {
	MaxPayloadBytes int // the payload's limit (--max-payload-bytes)
	// ValueLimit bounds every other mapped column: the larger of MaxPayloadBytes and decode's default.
	ValueLimit int
	// Check, when set, refuses an event the broker would refuse (decode.Config.Check); the row becomes a
	// RowError with its text.
	Check func(cdc.Event) error
}

// Map maps one row of the table: tuple holds its values in the order of the columns Resolve got, the
// commit's position and time (commitTime stands in for the event time when the mapping has no timestamp
// column, or it is NULL). The stream maps its inserts and a RowMapper the rows read with SELECT by this
// one function. drop is true for a tombstone with amqp.tombstone=drop: nothing is published and the row
// is not quarantined. A row that cannot become an event is a RowError naming the column and the option.
func (r *Relation) Map(lim Limits, tuple []pgtext.Value, commitLSN cdc.LSN, commitTime time.Time) (ev cdc.Event, drop bool, rowErr *pgtext.RowError) {
	return mapTuple(&lim, mappedTuple{rel: r, tuple: tuple, commitLSN: commitLSN, commitTime: commitTime})
}

// IDPos is the position of the event id column (table.field.event.id) among the columns Resolve got,
// or -1.
func (r *Relation) IDPos() int { return r.cols[roleID].pos }

// EventID is the event id the id column's text data names: bytea in hex without \x, other types as
// they are.
func (r *Relation) EventID(data []byte) string { return idText(data, r.cols[roleID].oid) }

// RowColumns keeps the row of a mapped event for its quarantine record, should the broker refuse it: one
// copy of the columns' texts, except the payload when the body is the column's value (no envelope, no
// tombstone), which shares ev.Payload.
func (r *Relation) RowColumns(names []string, tuple []pgtext.Value, ev cdc.Event) []cdc.Column {
	payload := r.cols[rolePayload]
	shared := -1
	if payload.pos >= 0 && !ev.Mapped.Tombstone && !r.mapping.envelope() && tuple[payload.pos].Kind == pgtext.KindText {
		shared = payload.pos
	}
	size := 0
	for i, v := range tuple {
		if i != shared {
			size += len(v.Data)
		}
	}
	buf := make([]byte, 0, size)
	cols := make([]cdc.Column, len(tuple))
	for i, v := range tuple {
		cols[i].Name = names[i]
		switch {
		case v.Kind == pgtext.KindNull:
			cols[i].Null = true
		case v.Kind != pgtext.KindText: // unchanged TOAST is never sent for an insert
		case i == shared:
			cols[i].Text, cols[i].Bytea = ev.Payload, payload.oid == pgtext.OIDBytea
		default:
			buf = append(buf, v.Data...)
			cols[i].Text = buf[len(buf)-len(v.Data) : len(buf) : len(buf)]
		}
	}
	return cols
}
