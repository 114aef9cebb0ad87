// Package quarantine owns writing the router's quarantine table (<schema>.quarantine): the outbox rows that
// cannot become events and the events the broker refuses, from the stream, the initial snapshot and
// backfills alike. It is the one writer of that table's records.
//
// It guarantees, each pinned by a test:
//   - A record never fails to be written because of the row's content. Each column value is stored as its
//     bounded prefix (cdc.MaxStoredValue bytes), made valid UTF-8 (invalid sequences and NUL become U+FFFD),
//     in JSON text whose only \u escapes are for control characters below U+0020, so jsonb accepts it in any
//     server encoding, SQL_ASCII included. A value that was cut or was not valid UTF-8 gets a note in
//     value_notes: its whole length in bytes, the SHA-256 of the whole value, truncated and invalid_utf8.
//   - If the INSERT still fails with a data error (SQLSTATE class 22, e.g. a character the server encoding
//     cannot hold) or a program limit (class 54), a minimal record is written instead: slot, position, key,
//     event id and reason, row_values NULL and value_notes {"values_not_stored": "<PostgreSQL's message>"}.
//     A last attempt keeps only ASCII in every text.
//   - Each row has its own key (slot, lsn, row_key): a streamed row's is its WAL position and its ordinal
//     among the inserts at that position (row_key empty for ordinal 0, '#<n>' for ordinal n), stable across
//     replays; a snapshot or backfill row's is its outbox key as a JSON array (Key). A replayed row does not
//     make a second record and is not an error.
//
// Other errors (connection, permission, a missing column when migrations were not run) are returned
// wrapped: the caller retries or stops, it never skips the row.
//
// It also gives the operator commands their access to the table (Records, ReplayEvent, PublishConfirmed):
//   - A record is never deleted except by Purge, and Purge deletes only records handled before a given time;
//     replaying or discarding marks handled_at and handled_how, once (MarkHandled).
//   - A replay uses the outbox row when it is still there, else the stored values only when none was cut or
//     replaced (value_notes); both go through decode.MapRow. A record neither can turn into a valid event is
//     refused with ErrNotReplayable and stays open. A replayed event is marked cdc.Event.Replayed (its
//     message carries route/message's x-replayed, x-quarantine-id and the quarantine time) and is marked handled only after its
//     positive confirm; a mapped one keeps the record's commit time (commit_time) as its timestamp.
//   - A streamed record stores its transaction's commit time (commit_time; NULL for snapshot and backfill rows).
//
// Bursts aggregates the records of the messages any role able to log in can emit, as many as it likes
// (non-transactional ones, and those failing authentication), so that a flood costs one INSERT per second:
//   - Such messages of one kind (BurstKind: the reason up to its first digit, so a number a sender chooses
//     opens no burst of its own) received within BurstWindow make one record, the first message's, whose
//     reason counts them and names their last LSN and bytes; any other record is written on its own
//     (TestBurstKind, TestBurstsAggregateOneRecordPerKind).
//   - A record of messages failing authentication (which may be a writer's events, signed with a key the
//     router lost) keeps each one's bounded content, the first as content and each other as "content <LSN>",
//     at most KeptPerRecord of them: a burst that holds so many is due at once (TestBurstsKeepEachUnauthenticatedMessage).
//   - A burst stays open, with what its messages hold (the stream's unresolved positions), until its record
//     is written (Written), so a record that could not be written is never lost from the count.
//
// It never logs and never returns a value in an error, so no payload reaches a log through it.
package quarantine
