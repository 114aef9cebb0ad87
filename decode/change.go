package decode

import (
	"fmt"
	"strings"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// insert decodes an Insert: an insert into the outbox becomes an Event or a Quarantine; one that drifted
// (see relation.problem) a *DriftError or, with OnDriftQuarantine, a Quarantine. None is skipped.
func (d *Decoder) insert(walStart cdc.LSN, r *reader, h Handler) error {
	oid := r.u32("relation OID")
	r.marker("new tuple marker", 'N')
	d.tuple = r.tuple(d.tuple)
	rel, err := d.change(msgInsert, r, oid)
	if err != nil {
		return err
	}
	if len(d.tuple) != len(rel.columns) {
		return protocolError(msgInsert, "tuple has %d columns, relation %s has %d", len(d.tuple), rel.table, len(rel.columns))
	}
	for _, v := range d.tuple {
		if v.Kind == kindBinary {
			return protocolError(msgInsert, "binary column value in %s: the slot must be read in text mode", rel.table)
		}
	}
	ordinal := d.ordinal(walStart)
	if rel.problem != "" {
		if d.cfg.OnDrift != OnDriftQuarantine {
			return &DriftError{Table: rel.table, Outbox: strings.Join(d.names, ", "), LSN: walStart, Problem: rel.problem, fix: rel.fix}
		}
		return d.quarantine(walStart, ordinal, rel, rel.problem, h)
	}
	if rel.mapped != nil {
		return d.insertMapped(walStart, ordinal, rel, h)
	}
	var f fields
	for c, pos := range rel.index { // every column is present: shapeDrift found none missing

		switch v := d.tuple[pos]; v.Kind {
		case kindNull:
			f[c].state = stateNull
		case kindText:
			f[c] = field{state: stateText, text: v.Data}
		}
	}
	ev, rowErr := mapFields(&d.cfg, &f, d.commitLSN, true) // the relation has no drift: payload and headers are json or jsonb
	if rowErr != nil {
		return d.quarantine(walStart, ordinal, rel, rowErr.Reason, h)
	}
	ev.LSN, ev.Ordinal, ev.Table, ev.CommitTime = walStart, ordinal, rel.table, d.commitTime
	if err := h.Event(ev); err != nil {
		return fmt.Errorf("decode: event %s at %s: %w", ev.ID, walStart, err)
	}
	return nil
}

// insertMapped hands an insert into a mapped outbox to the Handler: an Event, a Quarantine, or nothing
// for a tombstone with amqp.tombstone=drop.
func (d *Decoder) insertMapped(walStart cdc.LSN, ordinal int, rel *relation, h Handler) error {
	ev, drop, rowErr := rel.mapped.Map(d.cfg.limits(), d.tuple, d.commitLSN, d.commitTime)
	switch {
	case rowErr != nil:
		return d.quarantine(walStart, ordinal, rel, rowErr.Reason, h)
	case drop:
		return nil
	}
	ev.LSN, ev.Ordinal, ev.Table, ev.CommitTime = walStart, ordinal, rel.table, d.commitTime
	ev.Mapped.Columns = rel.mapped.RowColumns(rel.columns, d.tuple, ev)
	if err := h.Event(ev); err != nil {
		return fmt.Errorf("decode: event %s at %s: %w", ev.ID, walStart, err)
	}
	return nil
}

// ordinal is the index of an insert at walStart among the open transaction's inserts at that position.
// Positions never go back within a transaction (the reorder buffer replays its changes in LSN order), and
// the rows of one WAL record (a COPY's heap multi-insert) share its position and are consecutive, so
// counting the run of equal positions numbers them deterministically: replaying the transaction gives
// the same ordinals. All rows of a WAL record belong to one relation.
func (d *Decoder) ordinal(walStart cdc.LSN) int {
	if d.run == 0 || walStart != d.runLSN {
		d.runLSN, d.run = walStart, 0
	}
	d.run++
	return d.run - 1
}

// quarantine hands the current tuple to the Handler as a Quarantine with bounded raw values.
func (d *Decoder) quarantine(walStart cdc.LSN, ordinal int, rel *relation, reason string, h Handler) error {
	q := cdc.Quarantined{LSN: walStart, Ordinal: ordinal, CommitLSN: d.commitLSN, CommitTime: d.commitTime, Table: rel.table,
		EventID: eventID(rel, d.tuple), Columns: rawColumns(rel.columns, d.tuple), Reason: reason}
	if err := h.Quarantine(q); err != nil {
		return fmt.Errorf("decode: quarantine insert at %s: %w", walStart, err)
	}
	return nil
}

// update validates an Update; updates are never events.
func (d *Decoder) update(r *reader) error {
	oid := r.u32("relation OID")
	if m := r.u8("tuple marker"); m == 'K' || m == 'O' {
		d.tuple = r.tuple(d.tuple)
		r.marker("new tuple marker", 'N')
	} else if m != 'N' && r.err == "" {
		r.fail(fmt.Sprintf("tuple marker %q, want 'K', 'O' or 'N'", m))
	}
	d.tuple = r.tuple(d.tuple)
	_, err := d.change(msgUpdate, r, oid)
	return err
}

// delete validates a Delete; deletes are never events.
func (d *Decoder) delete(r *reader) error {
	oid := r.u32("relation OID")
	if m := r.u8("tuple marker"); m != 'K' && m != 'O' && r.err == "" {
		r.fail(fmt.Sprintf("tuple marker %q, want 'K' or 'O'", m))
	}
	d.tuple = r.tuple(d.tuple)
	_, err := d.change(msgDelete, r, oid)
	return err
}

// truncate validates a Truncate; truncates are never events.
func (d *Decoder) truncate(r *reader) error {
	r.skipTruncate()
	if reason := r.end(); reason != "" {
		return protocolError(msgTruncate, "%s", reason)
	}
	if !d.inTxn {
		return protocolError(msgTruncate, "Truncate outside Begin…Commit")
	}
	return nil
}

// change checks what every row change needs: a complete message, an open transaction and a relation
// announced by a Relation message.
func (d *Decoder) change(msg byte, r *reader, oid uint32) (*relation, error) {
	if reason := r.end(); reason != "" {
		return nil, protocolError(msg, "%s", reason)
	}
	if !d.inTxn {
		return nil, protocolError(msg, "change outside Begin…Commit")
	}
	rel, ok := d.relations[oid]
	if !ok {
		return nil, protocolError(msg, "relation OID %d was not announced by a Relation message", oid)
	}
	return rel, nil
}
