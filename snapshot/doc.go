// Package snapshot owns reading the rows already in the outbox table and handing them to the publisher:
// the initial snapshot of a new slot, read inside the slot's exported snapshot so that no row is missed
// or published twice at the point where streaming takes over, and the on-demand backfill of retained
// rows while `run` keeps streaming.
//
// Rows are read in keyset pages over the table's unique key (aggregate_type, aggregate_id,
// aggregate_version), so memory stays bounded whatever the table size and every aggregate's rows are
// published in version order. For a partitioned outbox, whose unique key must include the partition key,
// the partition key's columns follow (e.g. occurred_at): the aggregate key alone may repeat across
// partitions, and a page ending between two such rows would otherwise skip the second. Progress (the last key whose rows, and every row before it, were confirmed)
// is stored in the router's snapshots table, so a crashed snapshot or backfill resumes from that key: a
// crash may publish some rows twice, never lose one.
//
// No row is skipped or dropped, each pinned by a test:
//   - A row that cannot become an event (the decoder's rules), or whose event the publisher refuses with
//     an error wrapping cdc.ErrUnpublishable, is written to the quarantine table through package
//     quarantine, under the job's slot and read position and keyed by quarantine.Key, and counts as done.
//   - A row whose event the broker refuses per message (cdc.PerMessage: a per-message channel close, a 403
//     on an exchange of its own, a return from an exchange of its own, a nack) does not end the copy when
//     Config.Renew is set: the copy takes a new publisher, goes back to its last confirmed row, publishes
//     the rows up to the furthest one it had read one at a time, and quarantines a row refused
//     cdc.StrikesToQuarantine times in a row while alone in flight (a return or a nack: and for
//     Config.RefusalRetry since the first), with the broker's reason; then it goes on (refusals.go). The
//     stream's safety net does the same for streamed events, so an event is treated alike whoever publishes it.
//   - A row with a NULL key part is never after anything in keyset order, so where the key columns allow
//     NULL (the setup check refuses that, the copy does not rely on it) the pages read complete keys only
//     and one last pass reads the others; those rows are keyed [type, id, version, "ctid (b,i)"].
//   - CopyMerged copies several native tables whose keys order alike (Mergeable) in one key order across
//     them, so an aggregate's rows arrive in version order whichever table holds them; each table keeps its
//     own job and progress, and a crash resumes each after its own key (TestInitialSnapshotMergesAggregates-
//     AcrossTables, TestMergedSnapshotResumesAfterKill in cmd/cdc-router).
//
// An initial snapshot resumed in a new snapshot (after a crash) leaves out the rows of a native table that
// the slot's own snapshot did not see (Config.SeenBy, recorded with the job as Job.ReadSnapshot): the stream
// delivers them, in commit order with the events only it has (TestResumedSnapshotLeavesLaterRowsToTheStream).
// Where no such record tells them apart (a slot without one, a table rewritten since, a mapped table), it
// leaves out the rows whose keys the slot's inserts name, read from the slot without consuming it
// (LeaveStreamed, Config.Streamed; TestInsertKeys, and TestResumedCopyLeavesWhatTheSlotStreams in initial).
//
// An outbox table of another shape (a decode.Mapping, run --config) is paged by its primary key instead (or
// a unique index on NOT NULL columns; a table with neither is refused by CheckTable before anything is
// recorded), its columns read as text and mapped by decode.RowMapper, the stream's code. Its progress is
// stored as {"primary_key": [...]}, its quarantined rows keep the table's own name, column names and key
// values. Per key, its rows come in primary-key order, which is write order only for a sequence id.
//
// A copy that ends because its context ended (a stop) waits for the confirms of the rows already published
// and stores how far they reach, within Config.StopBy's bounds (run's --shutdown-timeout; 5 s each without):
// rows whose confirms come later are published again by the next start, never lost
// (TestShutdownTimeoutBoundsAStopDuringTheSnapshot in e2e).
//
// It never touches the replication connection: the caller creates the slot and hands over the name of its
// exported snapshot.
package snapshot
