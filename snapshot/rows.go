package snapshot

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/quarantine"
)

// emit publishes one row, or quarantines it, and applies the rate limit. raw holds the row's columns in
// the order of columnNames, then the keyset's extra columns, then, in the NULL-key pass (nullPass), its ctid.
// A quarantined row is handled: it leaves nothing outstanding in its page.
func (c *copier) emit(ctx context.Context, page offsets.Txn, raw []*string, nullPass bool) (Key, error) {
	if c.mapped != nil {
		return c.emitMapped(ctx, page, raw)
	}
	values := make(map[string]*string, len(columnNames))
	for i, name := range columnNames {
		values[name] = raw[i]
	}
	key := Key{AggregateType: deref(raw[1]), AggregateID: deref(raw[2])}
	key.Version, _ = strconv.ParseInt(deref(raw[3]), 10, 64)
	for _, v := range raw[len(columnNames) : len(columnNames)+len(c.keys.extra)] {
		key.Partition = append(key.Partition, deref(v))
	}
	ev, err := decode.MapRow(c.cfg.Decode, values)
	var rowErr *decode.RowError
	switch {
	case errors.As(err, &rowErr):
		return key, c.quarantine(ctx, c.rowRecord(raw, key, rowErr.Reason, nullPass))
	case err != nil:
		return key, err
	}
	return key, c.publish(ctx, page, ev, func(reason string) cdc.Quarantined {
		q := quarantine.FromEvent(ev, c.cfg.Table, reason)
		q.RowKey = rowKey(key)
		if nullPass {
			q.RowKey = nullKey(raw)
		}
		return q
	})
}

// publish publishes ev as a row of the job's page, or, when the publisher refuses it as unpublishable,
// quarantines record(the refusal), and applies the rate limit. A quarantined row is handled: it leaves
// nothing outstanding in its page.
func (c *copier) publish(ctx context.Context, page offsets.Txn, ev cdc.Event, record func(reason string) cdc.Quarantined) error {
	ev.CommitLSN, ev.Backfill = c.job.ReadLSN, true
	careful := c.net.careful()
	if careful {
		if reason, ok := c.condemned(ev.ID); ok {
			c.net.refusals.Clear(ev.ID)
			return c.quarantine(ctx, record(reason)) // nothing of it is outstanding in its page
		}
	}
	c.pages.Add(page)
	var confirmed chan struct{}
	done := func() { c.pages.Confirm(page) }
	if careful {
		confirmed = make(chan struct{})
		done = func() { c.pages.Confirm(page); close(confirmed) }
	}
	err := c.pub.Publish(ctx, ev, done)
	switch {
	case errors.Is(err, cdc.ErrUnpublishable):
		// The publisher never calls done for a refused event: the record stands in for its confirm.
		if err := c.quarantine(ctx, record(err.Error())); err != nil {
			return err
		}
		c.pages.Confirm(page)
	case err != nil:
		return cdc.BrokerFailure(fmt.Errorf("publish: %w", err))
	case careful:
		if err := c.confirmedAlone(ctx, ev.ID, confirmed); err != nil {
			return err
		}
	}
	c.read++
	if c.cfg.Rate > 0 {
		due := c.began.Add(time.Duration(float64(c.read) / c.cfg.Rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	return nil
}

func (c *copier) quarantine(ctx context.Context, q cdc.Quarantined) error {
	if err := c.quar.Write(ctx, q); err != nil {
		return fmt.Errorf("quarantine row %s of %s: %w", q.RowKey, c.job.Name, err)
	}
	return nil
}

// rowRecord is the quarantine record of a row that cannot become an event: its bounded column values, keyed
// by the job's read position and the row's key.
func (c *copier) rowRecord(raw []*string, key Key, reason string, nullPass bool) cdc.Quarantined {
	cols := make(map[string]cdc.RawValue, len(columnNames))
	for i, name := range columnNames {
		if raw[i] == nil {
			cols[name] = cdc.NullValue()
		} else {
			cols[name] = cdc.TextValue(*raw[i])
		}
	}
	rk := rowKey(key)
	if nullPass {
		rk = nullKey(raw)
	}
	return cdc.Quarantined{LSN: c.job.ReadLSN, CommitLSN: c.job.ReadLSN, RowKey: rk, Table: c.cfg.Table,
		EventID: deref(raw[0]), Columns: cols, Reason: reason}
}

// rowKey is the quarantine row key of a row read in key order: quarantine.Key, and for a partitioned outbox
// its partition key values after it, ["order","o-1",3,"2026-12-01 10:00:00+00"], since the aggregate key
// alone may repeat across partitions and one record would then stand for two rows.
func rowKey(key Key) string {
	k := quarantine.Key(key.AggregateType, key.AggregateID, key.Version)
	if len(key.Partition) == 0 {
		return k
	}
	var b bytes.Buffer
	b.WriteString(strings.TrimSuffix(k, "]"))
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	for _, v := range key.Partition {
		b.WriteByte(',')
		enc.Encode(v)
		b.Truncate(b.Len() - 1) // Encode's newline
	}
	return b.String() + "]"
}

// nullKey is the row key of a row read by the NULL-key pass: [type, id, version, ctid] with JSON null for
// the NULL parts. The ctid tells apart rows whose keys are equal (a unique key lets NULLs repeat); it is
// stable while the snapshot or the page is read, so a resumed copy may add a second record for a row that
// was moved since, never lose one.
func nullKey(raw []*string) string {
	parts := []any{raw[1], raw[2], nil, "ctid " + deref(raw[len(raw)-1])}
	if raw[3] != nil {
		parts[2] = json.Number(*raw[3])
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(parts)
	return string(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
