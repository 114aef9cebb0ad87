package quarantine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Sources of a replayed event.
const (
	FromOutbox = "the outbox table"
	FromStored = "the stored values"
)

// ErrNotReplayable wraps the refusal of a record that neither the outbox table nor its stored values can
// turn into a valid event; its message is one sentence naming what to do instead.
var ErrNotReplayable = errors.New("cannot be replayed")

// ReplayEvent builds the event to publish again for rec. row is the outbox row with rec.EventID (as
// snapshot.ReadRow returns it), nil when it is no longer there: then the stored values are used, but only
// when none was cut or replaced (value_notes). Both go through decode.MapRow with cfg, as a backfill's rows
// do. The event keeps the record's commit position and is marked Replayed (the message carries the replay
// headers of route/message).
func ReplayEvent(cfg decode.Config, rec Record, row map[string]*string) (ev cdc.Event, source string, err error) {
	source = FromOutbox
	if row == nil {
		source = FromStored
		if row, err = storedValues(rec); err != nil {
			return cdc.Event{}, source, err
		}
	}
	ev, err = decode.MapRow(cfg, row)
	var rowErr *decode.RowError
	switch {
	case errors.As(err, &rowErr) && source == FromOutbox:
		return cdc.Event{}, source, fmt.Errorf("record %d %w: its row in the outbox table still cannot become an event "+
			"(%s): fix the row there, or discard the record", rec.ID, ErrNotReplayable, rowErr.Reason)
	case errors.As(err, &rowErr):
		return cdc.Event{}, source, fmt.Errorf("record %d %w: its row is no longer in the outbox table and its stored "+
			"values still cannot become an event (%s): insert a fixed row (docs/howto/handle-quarantine.md#inspect-and-fix-with-sql), then "+
			"discard the record", rec.ID, ErrNotReplayable, rowErr.Reason)
	case err != nil:
		return cdc.Event{}, source, err
	}
	ev.CommitLSN = rec.CommitLSN
	if ev.CommitLSN == 0 {
		ev.CommitLSN = rec.LSN
	}
	ev.Replayed = &cdc.Replayed{RecordID: rec.ID, QuarantinedAt: rec.QuarantinedAt}
	return ev, source, nil
}

// storedValues returns the record's row_values as MapRow's input, or refuses when they are not the whole row.
func storedValues(rec Record) (map[string]*string, error) {
	cut, notStored, err := cutColumns(rec.Notes)
	if err != nil {
		return nil, err
	}
	if rec.Values == nil || notStored {
		return nil, fmt.Errorf("record %d %w: its row is no longer in the outbox table and its values were not stored "+
			"(PostgreSQL refused them): insert the row again if you have it, then discard the record", rec.ID, ErrNotReplayable)
	}
	if len(cut) > 0 {
		slices.Sort(cut)
		return nil, fmt.Errorf("record %d %w: its row is no longer in the outbox table and the stored value of %s is "+
			"not the whole value (cut to 64 KiB or not valid UTF-8, see value_notes): insert the row again if you have "+
			"it, then discard the record", rec.ID, ErrNotReplayable, strings.Join(cut, ", "))
	}
	var values map[string]*string
	if err := json.Unmarshal(rec.Values, &values); err != nil {
		return nil, fmt.Errorf("record %d: row_values is not a JSON object of texts: %w", rec.ID, err)
	}
	return values, nil
}

// Publisher takes an event to the broker and calls done after a positive confirm; route.Router satisfies it.
type Publisher interface {
	Publish(ctx context.Context, ev cdc.Event, done func()) error
	Failed() <-chan struct{}
	Err() error
}

// PublishConfirmed publishes ev and waits for its positive confirm, the publisher's failure, ctx or timeout.
// An event the broker can never accept is refused with ErrNotReplayable.
func PublishConfirmed(ctx context.Context, pub Publisher, ev cdc.Event, id int64, timeout time.Duration) error {
	confirmed := make(chan struct{})
	err := pub.Publish(ctx, ev, func() { close(confirmed) })
	if errors.Is(err, cdc.ErrUnpublishable) {
		return fmt.Errorf("record %d %w: RabbitMQ would still refuse its message (%v): fix the cause first", id,
			ErrNotReplayable, err)
	}
	if err != nil {
		return fmt.Errorf("publish record %d: %w", id, err)
	}
	select {
	case <-confirmed:
		return nil
	case <-pub.Failed():
		return fmt.Errorf("publish record %d: RabbitMQ did not confirm it: %w", id, pub.Err())
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("publish record %d: no confirm from RabbitMQ within %v", id, timeout)
	}
}

// nativeKeyColumns are columns every record of a native outbox row has (decode.MapRow's input).
var nativeKeyColumns = []string{"aggregate_type", "aggregate_version"}

// MappedShape reports whether rec's stored values are those of a table in another shape (a mapped table,
// run --config): they have none of the native shape's aggregate columns. A record without stored values
// says nothing, and is taken as native.
func MappedShape(rec Record) bool {
	if rec.Values == nil {
		return false
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(rec.Values, &values); err != nil {
		return false
	}
	for _, c := range nativeKeyColumns {
		if _, ok := values[c]; ok {
			return false
		}
	}
	return true
}

// ReplayMapped builds the event to publish again for rec, a row of a mapped table, with mapper, the
// table's mapping resolved against its columns (snapshot.ReadMappedRow): row is the row with rec's event
// id in the order of mapper.Columns(), nil when it is no longer there; then the stored values are used, but
// only when none was cut or replaced, a column missing from them is NULL. The row is mapped as the stream
// maps it, with the record's commit time where the mapping uses it (a table without a timestamp column:
// the AMQP timestamp and timestamp_in_ms); a record that has none stored (one of a snapshot or backfill
// row, or written before migration 011) falls back to its quarantine time. The event keeps the record's
// commit position and is marked Replayed.
func ReplayMapped(mapper *decode.RowMapper, rec Record, row []*string) (ev cdc.Event, source string, err error) {
	source = FromOutbox
	if row == nil {
		source = FromStored
		values, err := storedValues(rec)
		if err != nil {
			return cdc.Event{}, source, err
		}
		for _, c := range mapper.Columns() {
			row = append(row, values[c.Name])
		}
	}
	committed := rec.CommitTime
	if committed.IsZero() {
		committed = rec.QuarantinedAt
	}
	ev, drop, err := mapper.Map(row, committed)
	var rowErr *decode.RowError
	switch {
	case errors.As(err, &rowErr) && source == FromOutbox:
		return cdc.Event{}, source, fmt.Errorf("record %d %w: its row in %s still cannot become an event "+
			"(%s): fix the row there, or discard the record", rec.ID, ErrNotReplayable, rec.Table, rowErr.Reason)
	case errors.As(err, &rowErr):
		return cdc.Event{}, source, fmt.Errorf("record %d %w: its row is no longer in %s and its stored "+
			"values still cannot become an event (%s): insert a fixed row (docs/howto/handle-quarantine.md#inspect-and-fix-with-sql), then "+
			"discard the record", rec.ID, ErrNotReplayable, rec.Table, rowErr.Reason)
	case err != nil:
		return cdc.Event{}, source, err
	case drop:
		return cdc.Event{}, source, fmt.Errorf("record %d %w: its row is a tombstone, which amqp.tombstone=drop "+
			"publishes as nothing: discard the record", rec.ID, ErrNotReplayable)
	}
	ev.CommitLSN = rec.CommitLSN
	if ev.CommitLSN == 0 {
		ev.CommitLSN = rec.LSN
	}
	ev.Replayed = &cdc.Replayed{RecordID: rec.ID, QuarantinedAt: rec.QuarantinedAt}
	return ev, source, nil
}
