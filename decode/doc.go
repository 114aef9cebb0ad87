// Package decode turns pgoutput logical replication messages (proto_version 1, text mode, no streaming)
// into outbox events.
//
// It owns:
//   - parsing each XLogData's WALData with its own bounds-checked reader (pglogrepl's decoders index
//     past the end of truncated buffers and allocate whatever length a corrupt tuple claims);
//   - the relation cache, keyed by relation OID and replaced by every Relation message, with each
//     column's type OID;
//   - the transaction frame: Begin … Commit, with the commit LSN and the end LSN to acknowledge;
//   - the row mapping from the outbox table's text columns to a cdc.Event, shared with the snapshot
//     reader through MapRow;
//   - drift detection: an insert the outbox's current shape or the publication makes undecodable.
//   - logical decoding messages with Config.MessagePrefix (pg_logical_emit_message): a transactional one
//     holds a JSON envelope keyed by the outbox columns and is mapped by the row rules, at its place among
//     the transaction's inserts (message.go);
//   - the use of Config.Mapping (run --config): an outbox of another shape is resolved once per Relation
//     message (mapping.Resolve) and each of its inserts mapped by mapping.Relation.Map; the rows of such a
//     table read with SELECT (snapshot, backfill, quarantine replay) are mapped by the same code through a
//     RowMapper (rowmapper.go). What a mapping is and what a row maps to (Debezium's outbox router
//     options, routing keys, typed headers, content type, timestamp, tombstone) is package
//     decode/mapping's; PostgreSQL text values, type OIDs and RowError are decode/internal/pgtext's.
//
// It guarantees:
//   - a malformed, truncated or unexpected message returns an error and never panics; after an error the
//     Decoder is unusable and the replication connection must be restarted with a new Decoder;
//   - the Handler sees Begin, then the transaction's inserts in WAL order, then Commit with
//     CommitMessage.TransactionEndLSN, the position to acknowledge;
//   - a message with the prefix is an Event or a Quarantine like an insert, never dropped: a malformed
//     envelope and every non-transactional message (written even when its transaction rolls back) are
//     quarantined; a message with another prefix, or with no prefix configured, is skipped; one with the
//     prefix whose content the stream's reader discarded unread (over MessageLimit) is a Quarantine from
//     its header through Oversized, with its size and no content (TestOversizedMessagesAreQuarantinedFromTheirHeader);
//   - a message with the prefix is an Event only when its signature line holds a MAC that verifies
//     (crypto/hmac, constant time) with a key of Config.EmitKeys over its envelope and the xid of the
//     transaction it is decoded in; an unsigned, forged or altered one, one signed with an unknown key or
//     copied from another transaction is a Quarantine whose reason starts "unauthenticated emitted
//     message: ", keeping at most MaxUnauthenticatedStored bytes of it and no event id (emitauth.go,
//     TestDecodeUnauthenticatedMessages);
//   - every insert is an Event, a Quarantine, or a *DriftError returned before the Handler sees anything
//     of it; none is dropped. An insert into a relation that is not Config.Table (a renamed or swapped
//     outbox, another table in the publication) or into an outbox whose Relation lacks a column or has
//     one of a type outside acceptedTypes is drift: with OnDriftRefuse a *DriftError naming the fix,
//     with OnDriftQuarantine a Quarantine whose reason is the drift. A Relation message alone never fails;
//   - every Event and Quarantine of a streamed row carries its insert's WAL start (LSN) and its Ordinal
//     among the transaction's inserts at that position (a COPY writes many rows at one), so (LSN,
//     Ordinal) names the row uniquely and the same way on every replay of the stream;
//   - columns are matched by name, so column order and extra columns do not matter;
//   - with a Mapping, a table that does not fit it (mapping.Resolve's problem) is drift found from the
//     Relation message, never a per-row check (TestMappingDrift), and a row mapping.Relation.Map refuses
//     is a Quarantine with its reason (TestMappingQuarantinesRows); only a tombstone with
//     amqp.tombstone=drop, the user's explicit choice, gives neither an Event nor a Quarantine;
//   - payload and headers bytes are passed through as PostgreSQL sent them, copied out of the WAL buffer;
//   - memory is bounded by bytes: a payload over Config.MaxPayloadBytes (or another value over the
//     larger of that and DefaultMaxPayloadBytes) is quarantined from its length on the wire and is never
//     copied, converted or validated whole; a Quarantine keeps per value at most cdc.MaxStoredValue
//     bytes, the length and a SHA-256 (cdc.RawValue), and an event id of at most 255 bytes.
//
// It never touches the replication connection, never acknowledges a position, never re-encodes a
// payload, and never turns an outbox insert that fails the row mapping into anything but a Quarantine.
package decode
