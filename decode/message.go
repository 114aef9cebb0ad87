package decode

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// MessageTable is the cdc.Quarantined.Table of a quarantined logical decoding message: "message:" and
// the prefix it was emitted with.
const MessageTable = "message:"

// MessageColumn is the one column of a quarantined message: its content as emitted.
const MessageColumn = "content"

// message decodes a logical decoding Message (pg_logical_emit_message). One whose prefix is not
// Config.MessagePrefix (or with no prefix configured) is skipped: other tools use messages too. One with
// the prefix is an event envelope (see mapEnvelope), published only when signed by <schema>.emit in its
// transaction (verifyEmitted):
//   - transactional, it arrives between Begin and Commit in the transaction's order and becomes an Event
//     like an insert, or a Quarantine when the envelope is malformed; it carries walStart and an Ordinal
//     as an insert does;
//   - non-transactional, it is a Quarantine, never an Event: PostgreSQL writes it even when the
//     transaction that emitted it rolls back, so publishing it could announce a change that never
//     happened;
//   - without a MAC that verifies with Config.EmitKeys and the transaction's xid (unsigned, forged, or
//     copied from another transaction), it is a Quarantine whose reason starts "unauthenticated emitted
//     message: ", never an Event.
func (d *Decoder) message(walStart cdc.LSN, r *reader, h Handler) error {
	flags := r.u8("flags")
	r.lsn("message LSN")
	prefix := r.cstring("prefix")
	content := r.takeLong(uint64(r.u32("content length")), "content")
	if reason := r.end(); reason != "" {
		return protocolError(msgMessage, "%s", reason)
	}
	if d.cfg.MessagePrefix == "" || string(prefix) != d.cfg.MessagePrefix {
		return nil
	}
	return d.emitted(walStart, flags&1 != 0, content, int64(len(content)), h)
}

// NonTransactionalReason starts the reason of every quarantined non-transactional message.
const NonTransactionalReason = "non-transactional message (pg_logical_emit_message(false, …)): " +
	"PostgreSQL writes it even when its transaction rolls back, so it is not published; emit with transactional = true"

// Oversized hands h a message with Config.MessagePrefix whose content, size bytes and over MessageLimit,
// was discarded unread by the reader of the stream: a Quarantine with its size in the reason and no
// content, in the place and with the key the whole message would have had.
func (d *Decoder) Oversized(walStart cdc.LSN, transactional bool, size int64, h Handler) error {
	return d.emitted(walStart, transactional, nil, size, h)
}

// MessageLimit is the largest content of a message with Config.MessagePrefix that is read: one over it
// is an envelope over the limit whatever it holds, so it can be quarantined from its header alone.
func (d *Decoder) MessageLimit() int { return d.envelopeLimit() }

// MessagePrefix is Config.MessagePrefix: the prefix of the messages that are events ("" for none).
func (d *Decoder) MessagePrefix() string { return d.cfg.MessagePrefix }

// emitted handles a message with the prefix: content, or nil when its size bytes were not read.
func (d *Decoder) emitted(walStart cdc.LSN, transactional bool, content []byte, size int64, h Handler) error {
	unread := ""
	if content == nil && size > 0 {
		unread = fmt.Sprintf("the message is %d bytes, over the %d-byte limit of an envelope (--max-payload-bytes plus 8 MiB); "+
			"its content was discarded unread", size, d.envelopeLimit())
	}
	if !transactional {
		reason := NonTransactionalReason
		if unread != "" {
			reason += "; " + unread
		}
		return d.quarantineMessage(walStart, 0, 0, content, reason, h)
	}
	if !d.inTxn {
		return protocolError(msgMessage, "transactional message outside Begin…Commit")
	}
	ordinal := d.ordinal(walStart)
	if unread != "" {
		return d.quarantineMessage(walStart, ordinal, d.commitLSN, nil, "message: "+unread, h)
	}
	envelope, unauthenticated := verifyEmitted(d.cfg.EmitKeys, d.xid, content)
	if unauthenticated != "" {
		return d.quarantineUnauthenticated(walStart, ordinal, content, unauthenticated, h)
	}
	ev, rowErr := d.mapEnvelope(envelope)
	if rowErr != nil {
		return d.quarantineMessage(walStart, ordinal, d.commitLSN, envelope, "message: "+rowErr.Reason, h)
	}
	ev.LSN, ev.Ordinal, ev.CommitTime = walStart, ordinal, d.commitTime
	if err := h.Event(ev); err != nil {
		return fmt.Errorf("decode: event %s at %s: %w", ev.ID, walStart, err)
	}
	return nil
}

// quarantineMessage hands a message to the Handler as a Quarantine: its bounded content, and its envelope's
// id when it has one; a message whose content was not read (nil) has no content column.
func (d *Decoder) quarantineMessage(walStart cdc.LSN, ordinal int, commitLSN cdc.LSN, content []byte, reason string, h Handler) error {
	q := cdc.Quarantined{LSN: walStart, Ordinal: ordinal, CommitLSN: commitLSN, Table: MessageTable + d.cfg.MessagePrefix,
		Reason: reason}
	if content != nil {
		q.EventID, q.Columns = d.envelopeID(content), map[string]cdc.RawValue{MessageColumn: cdc.NewRawValue(content)}
	}
	if commitLSN != 0 { // transactional
		q.CommitTime = d.commitTime
	}
	if err := h.Quarantine(q); err != nil {
		return fmt.Errorf("decode: quarantine message at %s: %w", walStart, err)
	}
	return nil
}

// mapEnvelope maps a message's content, a JSON object whose keys are the outbox columns, to an event by
// the row rules (mapFields): id, aggregate_type, aggregate_id and event_type are JSON strings,
// aggregate_version and schema_version JSON integers (schema_version may be left out: 1), payload any JSON
// value, headers a JSON object (may be left out or null), occurred_at an RFC 3339 string (may be left out:
// the commit time). Other keys are ignored.
func (d *Decoder) mapEnvelope(content []byte) (cdc.Event, *RowError) {
	if limit := d.envelopeLimit(); len(content) > limit {
		return cdc.Event{}, pgtext.RowErrorf("the message is %d bytes, over the %d-byte limit of an envelope (--max-payload-bytes plus 8 MiB)",
			len(content), limit)
	}
	obj, err := envelopeObject(content)
	if err != nil {
		return cdc.Event{}, pgtext.RowErrorf("the content is not a JSON object: %v", err)
	}
	var f fields
	for c := range f {
		raw, ok := obj[columnName(c)]
		switch {
		case !ok && c == colSchemaVersion:
			f[c] = field{state: stateText, text: []byte("1")}
		case !ok && c == colOccurredAt:
			f[c] = field{state: stateText, text: []byte(d.commitTime.Format("2006-01-02 15:04:05.999999-07:00"))}
		case !ok:
		case bytes.Equal(raw, []byte("null")) && c != colPayload:
			f[c].state = stateNull
		default:
			text, reason := envelopeText(c, raw)
			if reason != "" {
				return cdc.Event{}, pgtext.RowErrorf("%s %s", columnName(c), reason)
			}
			f[c] = field{state: stateText, text: text}
		}
	}
	if f[colHeaders].state == stateNull {
		f[colHeaders] = field{}
	}
	return mapFields(&d.cfg, &f, d.commitLSN, false)
}

// envelopeLimit is the largest envelope parsed: the payload limit plus DefaultMaxPayloadBytes for the rest.
func (d *Decoder) envelopeLimit() int {
	return max(d.cfg.MaxPayloadBytes, DefaultMaxPayloadBytes) + DefaultMaxPayloadBytes
}

// envelopeObject parses one JSON object and nothing after it.
func envelopeObject(content []byte) (map[string]json.RawMessage, error) {
	if t := bytes.TrimLeft(content, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("not an object")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(content, &obj); err != nil {
		return nil, err
	}
	return obj, nil
}

// envelopeText is the column text of one envelope value, or why it has the wrong JSON type.
func envelopeText(c int, raw json.RawMessage) ([]byte, string) {
	switch c {
	case colPayload, colHeaders:
		return raw, ""
	case colAggregateVersion, colSchemaVersion:
		if raw[0] == '"' || raw[0] == '{' || raw[0] == '[' || raw[0] == 't' || raw[0] == 'f' {
			return nil, fmt.Sprintf("%s is not a JSON integer", pgtext.Quote(raw))
		}
		return raw, "" // mapFields parses the number text as an integer
	case colOccurredAt:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, fmt.Sprintf("%s is not a JSON string", pgtext.Quote(raw))
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, fmt.Sprintf("%s is not an RFC 3339 time like 2006-01-02T15:04:05.999999Z", strconv.Quote(s))
		}
		return []byte(t.UTC().Format("2006-01-02 15:04:05.999999-07:00")), ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, fmt.Sprintf("%s is not a JSON string", pgtext.Quote(raw))
	}
	return []byte(s), ""
}

// envelopeID is the id of a quarantined envelope when it has one (a JSON string of at most 255 bytes under
// the top-level key "id"), for the quarantine record; an envelope over the size limit is not parsed. The
// object is read up to that key only: emit writes it first (jsonb orders keys by length), so a flood of
// large messages is not parsed whole once per message.
func (d *Decoder) envelopeID(content []byte) string {
	if len(content) > d.envelopeLimit() {
		return ""
	}
	dec := json.NewDecoder(bytes.NewReader(content))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return ""
		}
		if key == "id" {
			var id string
			if dec.Decode(&id) != nil || len(id) > 255 {
				return ""
			}
			return id
		}
		var skip json.RawMessage
		if dec.Decode(&skip) != nil {
			return ""
		}
	}
	return ""
}
