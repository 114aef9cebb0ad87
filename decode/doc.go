// Package decode turns pgoutput logical replication messages (proto_version 1, text mode, no streaming)
// into outbox events.
//
// It owns:
//   - parsing each XLogData's WALData with its own bounds-checked reader (pglogrepl's decoders index
//     past the end of truncated buffers and allocate whatever length a corrupt tuple claims);
//   - the relation cache, keyed by relation OID and replaced by every Relation message;
//   - the transaction frame: Begin … Commit, with the commit LSN and the end LSN to acknowledge;
//   - the row mapping from the outbox table's text columns to a cdc.Event, shared with the snapshot
//     reader through MapRow.
//
// It guarantees:
//   - a malformed, truncated or unexpected message returns an error and never panics; after an error the
//     Decoder is unusable and the replication connection must be restarted with a new Decoder;
//   - the Handler sees Begin, then the transaction's outbox inserts in WAL order (each an Event or a
//     Quarantine, never dropped), then Commit with CommitMessage.TransactionEndLSN, the position to
//     acknowledge;
//   - columns are matched by name, so column order and extra columns do not matter;
//   - payload and headers bytes are passed through as PostgreSQL sent them, copied out of the WAL buffer.
//
// It never touches the replication connection, never acknowledges a position, never re-encodes a
// payload, and never turns an insert that fails the row mapping into anything but a Quarantine.
package decode
