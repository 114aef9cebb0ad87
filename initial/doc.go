// Package initial is a router's initial snapshot: which outbox tables still have rows to copy at start
// (Due), the check that every table can be copied before the slot is created (CheckTables), the copy of a
// new slot's rows in exactly the slot's exported snapshot (Copy), and the end of a copy a crash interrupted,
// in a new snapshot (Finish). Package snapshot reads and publishes the rows; this package decides which
// jobs run, records them with the position, and copies several tables merged where their keys allow.
//
// Invariants, each pinned by a test:
//   - A new slot's rows are read in the slot's own exported snapshot, so that the stream from the consistent
//     point adds every later row, none twice (e2e's snapshot tests).
//   - A copy resumed in a new snapshot may publish rows twice, never lose one; it resumes with the predicate
//     it started with (TestSIGTERMDuringTheSnapshot, TestMergedSnapshotResumesAfterKill).
//   - A copy resumed in a new snapshot leaves out the rows the stream delivers: those the slot's recorded
//     snapshot did not see, or, without a usable record (none, a table rewritten since, a mapped table), those
//     the slot's inserts up to the new snapshot name (snapshot.LeaveStreamed); so every aggregate's first
//     deliveries come in version order (TestResumedCopyLeavesWhatTheSlotStreams).
//   - A stop during the copy ends within Config.StopBy's bounds (run's --shutdown-timeout), the reader's
//     transaction and connection closed by then, and the next start resumes the copy
//     (TestShutdownTimeoutBoundsAStopDuringTheSnapshot).
//   - A copy never waits on a PostgreSQL it cannot reach for longer than about 1.5 x Config.PGTimeout: a probe
//     on a connection of its own every half of it that cannot reach the server ends the copy with a
//     pgserver.Retryable naming it, so the run restarts (cause postgres, /readyz 503) and resumes the copy; a
//     probe that is answered, even with a refusal, or a stop, leaves the copy to run (TestProbeTellsSilenceFromAnAnswer,
//     TestSilentPostgreSQLDuringTheSnapshotIsBounded).
//   - A table or predicate that cannot be copied is refused (cdc.Fatal); a check that fails on the connection
//     is not, and the run is retried (TestRefusalOnlyForTheTable, TestLongSnapshotSurvivesAPostgreSQLCut).
//   - An unfinished initial snapshot is never skipped: without --snapshot=initial, or for a table this run
//     does not read, the start is refused naming the fix (TestDue, TestSnapshotOfTwoOutboxesResumesPerTable).
//   - Due copies every table's rows only for a slot with neither a stored position nor any snapshot
//     record, resumes an unfinished job with the predicate it began with, and never copies a finished one
//     again (TestDue); each table of several is a job of its own, and a router of one table keeps the job
//     name it had before (TestJobNames, TestForTable).
//   - The jobs are recorded, with the snapshot the copy reads in, before the position the stream starts
//     from, so a crash between the two leaves jobs to resume (TestRecordStoresTheJobsThenThePosition).
//
// It never touches the replication connection: the stream creates the slot and hands over the name of its
// exported snapshot before it uses that connection again.
package initial
