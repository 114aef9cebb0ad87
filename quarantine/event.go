package quarantine

import (
	"encoding/hex"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Key is the row key of a snapshot or backfill row: its outbox key (aggregate_type, aggregate_id,
// aggregate_version) as a JSON array, e.g. ["a/b","c",1], so that distinct keys never share a record.
// Strings are written as in row_values (no \u escapes above U+007F); a string that is not valid UTF-8 (only
// possible in a SQL_ASCII database) is written as {"hex":"<its bytes>"} so that it stays distinct too.
func Key(aggregateType, aggregateID string, version int64) string {
	b := []byte{'['}
	b = appendKeyString(b, aggregateType)
	b = append(b, ',')
	b = appendKeyString(b, aggregateID)
	b = append(b, ',')
	b = strconv.AppendInt(b, version, 10)
	return string(append(b, ']'))
}

func appendKeyString(b []byte, s string) []byte {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		b, _ = appendString(b, []byte(s))
		return b
	}
	b = append(b, `{"hex":"`...)
	b = hex.AppendEncode(b, []byte(s))
	return append(b, `"}`...)
}

// FromEvent is the record of an event the broker refuses: its columns as PostgreSQL prints them
// (occurred_at in ISO form with +00, as a session with TimeZone=UTC shows it; an empty Headers as NULL), its
// id as EventID and reason as given. The table is ev.Table, or table when the event does not name one. An
// event of a mapped table that carries its row (ev.Mapped.Columns) is recorded with that row: the table's
// own column names and values, so that an operator finds the row. A streamed event is keyed by its position
// and ordinal (its CommitLSN when it carries no position); a snapshot or backfill event (ev.Backfill) by its
// read position (ev.CommitLSN) and Key.
func FromEvent(ev cdc.Event, table, reason string) cdc.Quarantined {
	if ev.Table != "" {
		table = ev.Table
	}
	q := cdc.Quarantined{LSN: ev.LSN, Ordinal: ev.Ordinal, CommitLSN: ev.CommitLSN, CommitTime: ev.CommitTime, Table: table,
		EventID: ev.ID, Reason: reason}
	if ev.Mapped != nil && ev.Mapped.Columns != nil {
		q.Columns = make(map[string]cdc.RawValue, len(ev.Mapped.Columns))
		for _, c := range ev.Mapped.Columns {
			q.Columns[c.Name] = c.Raw()
		}
	} else {
		q.Columns = nativeColumns(ev)
	}
	switch {
	case ev.Backfill:
		q.LSN, q.Ordinal, q.RowKey = ev.CommitLSN, 0, Key(ev.AggregateType, ev.AggregateID, ev.AggregateVersion)
	case ev.LSN == 0:
		q.LSN = ev.CommitLSN
	}
	if len(q.EventID) > maxEventID {
		q.EventID = validText(q.EventID, maxEventID)
	}
	return q
}

// nativeColumns are the columns of a native event as PostgreSQL prints them.
func nativeColumns(ev cdc.Event) map[string]cdc.RawValue {
	headers := cdc.NullValue()
	if len(ev.Headers) > 0 {
		headers = cdc.NewRawValue(ev.Headers)
	}
	return map[string]cdc.RawValue{
		"id":                cdc.TextValue(ev.ID),
		"aggregate_type":    cdc.TextValue(ev.AggregateType),
		"aggregate_id":      cdc.TextValue(ev.AggregateID),
		"aggregate_version": cdc.TextValue(strconv.FormatInt(ev.AggregateVersion, 10)),
		"event_type":        cdc.TextValue(ev.EventType),
		"schema_version":    cdc.TextValue(strconv.FormatInt(int64(ev.SchemaVersion), 10)),
		"payload":           cdc.NewRawValue(ev.Payload),
		"headers":           headers,
		"occurred_at":       cdc.TextValue(ev.OccurredAt.UTC().Format("2006-01-02 15:04:05.999999-07")),
	}
}
