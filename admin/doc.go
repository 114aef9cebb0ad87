// Package admin is the operator's view of one router's state in one database: `cdc-router status` (Report,
// as text and as the versioned JSON of status --json), `cdc-router reset` (Reset, and the peek of the slot
// that guards it), `cdc-router quarantine` (QuarantineList, QuarantineRecord, Replay, QuarantineDiscard over
// quarantine.Records), and the units they write for people.
//
// Invariants, each pinned by a test:
//   - A slot of the same name in another database is reported as foreign, and none of its facts are shown as
//     this database's (TestStatusJSONOfAMissingOrForeignSlot).
//   - status --json only ever adds fields within StatusSchemaVersion; a removal or a change of meaning makes
//     a new version (cmd/cdc-router's TestStatusJSON).
//   - Reset never drops a slot that holds unpublished events of its publication (inserts, and messages with
//     the router's prefix, in transactions past the acknowledged position) unless forced: it peeks them
//     without consuming, bounded in rows and time, and names how many; what it cannot count it refuses too
//     (cmd/cdc-router's TestResetRefusesToDropUnpublishedEvents).
//   - Reset counts only after the database's transactions that may still write into the slot (open with a
//     transaction ID, or prepared) have ended, waiting for them within a bound; those still in flight past
//     it make it refuse naming them, even with Force, since their events are in no count and a new slot
//     starts after them; status never says caught up while one exists (TestInFlightNamesAndWait,
//     TestInFlightTransactionsAsAnUnprivilegedRole, e2e's TestResetWaitsForTransactionsInFlight).
//   - Reset holds the slot's advisory lock throughout, so it refuses while a router of the slot runs in this
//     database and no router starts meanwhile; it touches nothing of other slots, backfills or quarantine
//     records.
//
// With shards (migrate --shards N), status and reset take --shard I/N (or I alone when there is one count
// of shards) and then work on that shard's slot and publication only; a shard whose publication and slot
// both do not exist is refused naming those that do, and status without --shard lists every shard found
// (Shards, ResolveShard, StatusOfShards; e2e's TestStatusAndResetOfAShard).
//
// `quarantine replay` publishes a record's event through a ReplayPublisher it is handed (cmd dials
// route.Router; admin imports no broker client) and marks the record handled only after its positive
// confirm (quarantine.PublishConfirmed; e2e's TestQuarantineCommands, TestQuarantineReplayReadsTheRecordsOwnTable,
// TestMappedQuarantineReplay); a record that cannot be replayed, or was handled before without Force, is
// named and the others go on. `quarantine show` says what a minimal record lacks
// (TestQuarantineRecordSaysWhatIsMissing).
//
// `cdc-router status` without a slot is Fleet: every pgoutput slot of the database merged with the records
// the routers keep of themselves (package registry), each slot with its router's role (or stopped, not
// heard from since, no record), its processes, the configuration its router runs with, its lag,
// quarantine and unfinished snapshots, records whose slot no longer exists, and the settings in which two
// live processes of one slot differ (TestFleetShowsEverySlotAndRecord); its JSON has its own
// FleetSchemaVersion, with the conventions of status --json. It counts no pending events (that needs a
// peek of each slot: status of one slot does it).
//
// It reads and writes over an ordinary connection only, never the replication connection, and never runs
// the stream.
package admin
