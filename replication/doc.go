// Package replication owns the replication connection and the stream's lifecycle: it checks the slot and
// the stored position before anything else, creates a missing slot (permanent, pgoutput) only when no
// position was ever stored, starts replication from the stored position, hands every XLogData to the
// decoder and every event to the publisher, answers keepalives that ask for a reply at once, and sends
// standby status updates on a timer and when the acknowledged position moves (at most one such update
// per 10 ms: at moderate rates it moves with almost every confirm).
//
// Invariants, each pinned by a test:
//   - One goroutine of this package owns the replication connection. pgserver opens it (ConnectReplication)
//     and runs its slot commands on it (CREATE_ and ALTER_REPLICATION_SLOT, TIMELINE_HISTORY) only when that
//     goroutine calls them, before START_REPLICATION; from START_REPLICATION on only this package reads it
//     or writes to it.
//   - The only LSN ever reported as flushed is the offsets.Tracker watermark: the end of a transaction whose
//     events, and those of every earlier transaction, were all confirmed. It is never zero and never goes back.
//   - Backpressure (a full publish window) stops reading WAL, never the status updates.
//   - A slot that is missing or lost while a position is stored, or a position stored by another cluster,
//     is refused within seconds, at every start, by pgserver.DecideStart's rules: the stream never silently
//     skips events.
//   - On any publish failure the whole stream restarts in-process from the acknowledged position, so every
//     unconfirmed event is published again in its original order.
//   - Progress inside a transaction survives a restart (of the session and of the process): the replay of
//     the oldest unacknowledged transaction passes over its items (events, quarantined rows and messages, in
//     stream order) that were confirmed or quarantined before, in whatever order, and publishes the rest in
//     order, with every later event of an aggregate that has one published again (offsets.Tracker.Pass).
//     Such a mark is applied only to the transaction it names (commit LSN and xid), on the cluster and timeline
//     it was counted on, under the same decoding configuration (markConfig: publication, tables, mappings,
//     message prefix, drift rule, the router's build); anything else is ignored and replaced. A replay with fewer items than its
//     mark fails the session and is then published whole. The LSN reported is still the whole-transaction
//     watermark (TestResumeMarkIsAppliedOnlyWhereItHolds, TestReplayResumesPastItsMark, and end to end
//     TestLargeTransactionCompletesUnderRepeatedCuts, TestSIGKILLInsideLargeTransactionResumesPastConfirmed and
//     TestHotAggregateDuplicatesPerFaultAreBounded). The next session of a Run starts past the watermark the
//     last one ended with when the slot and the stored position are behind it, on the same cluster and
//     timeline (TestRestartStartsPastTheConfirmedPosition, TestPostgresFailureAfterTheLastConfirmDoesNotRepublish).
//   - A stop ends within the shutdown timeout of its request, whatever the router waits for then (a full
//     publish window, confirms that never come, the publisher's close; the initial snapshot's confirms and
//     its progress store, through initial.Config.StopBy; and any wait on PostgreSQL: slot creation waiting
//     for running transactions, the start-up checks, a connection attempt, a quarantine record, the checks
//     due while streaming, each ended by the stop through stopClock.bounded or the run's context)
//     (TestStopClockBoundsTheStop, TestStopClockBoundsPostgreSQLWaits; end to end
//     TestShutdownTimeoutBoundsAStopWhileTheBrokerStalls, TestShutdownTimeoutBoundsAStopDuringTheSnapshot,
//     TestStopBoundsPostgreSQLWaits).
//   - A router that finds its slot held by another router stands by (metrics.StateStandby, retried every second),
//     which is neither a failure nor a restart.
//   - Two routers of a slot never copy its initial snapshot at once (slotlock.go: a copy holds the slot's lock
//     as a lease, asked every 250 ms and stopped within 1.5 s of the last check that found it held, at once on
//     a no or a failed connection; a copy resumed after taking the lock waits that lease and a margin first),
//     nor answer /readyz?active=1 with 200 at once, unless a process is held up past the margin
//     (TestCopyThatLostTheSlotLockStopsBeforeTheStandbyCopies).
//   - The slot's lock lives on the replication connection's session, whose wal_sender_timeout the run sets to
//     its lease (--lease): a router that stops answering while streaming keeps the slot at most that long past
//     its last status update. Its publisher writes only under the lease (Fence, route.Config.Fence): half of
//     the lease from each status update sent while it held, and never again in the run once the process was
//     held up for more than a second (TestFenceLapsesWithoutStatusUpdates, TestFenceBreaksOnAPause; end to end
//     TestPausedRouter).
//   - While only standbys answer (pgserver.ErrStandby: a failover in progress) the router looks for a primary
//     every second.
//   - The stream is read through copyboth.Frames, so a logical decoding message with another prefix, or with
//     the router's prefix over the decoder's MessageLimit, is discarded while it is read, never held whole;
//     one of the router's is then quarantined from its header (TestLargeMessagesAreJudgedFromTheirHeader).
//   - The quarantine records of messages anyone can emit (non-transactional, or failing authentication)
//     are aggregated per reason and per second (quarantine.Bursts); each such message holds the acknowledged
//     position until its burst's record is written (burst.go; end to end TestMessageFloodIsQuarantinedInBursts,
//     TestMessageBurstSurvivesAKill).
//   - No wait on a PostgreSQL that accepts TCP but does not answer lasts longer than Config.PGTimeout (run's
//     --pg-timeout): each connection attempt (ordinary, replication, reader; a shorter connect_timeout in the
//     URL wins), each group of start-up checks, START_REPLICATION, and the stream's silence (a status update
//     asks for a reply after half of it). Each such failure is a restart with cause postgres whose message
//     names the server; only slot creation waits without this bound (a stop still ends it), and the initial
//     snapshot's copy is watched instead (initial.Config.watch: a probe that cannot reach PostgreSQL ends it).
//   - A router that cannot read WAL shows it: once the walsender has been silent for longer than the bound, the
//     lag in time is at least the time since it last spoke (not before the first stream, not in standby).
//   - While starting or restarting, metrics.Stats.Waiting names what the router waits for (/readyz's problem);
//     a slot creation that waits is reported, with the transactions it waits for, for as long as it waits
//     (pgserver.WatchCreation).
//   - A promoted standby (the same system identifier, a later timeline) is streamed from only through the
//     slot it has (a failover slot's synchronized copy), never a new one; the timeline is recorded with the
//     position, and a stored position past the end of its timeline on that server is refused. A promotion during
//     the initial snapshot (whose slot no standby has: PostgreSQL 17 synchronizes a slot only once it streams)
//     is refused naming the unfinished snapshot and reset (pgserver's TestDecideStartAfterPromotion; end to
//     end TestPromotionDuringTheInitialSnapshotPG17).
//   - With Decode.MessagePrefix the stream starts only with the emit keys loaded (a missing or unreadable key
//     is refused naming the fix, TestMessagePrefixWithoutEmitKeyIsRefused) and reloads them at least every
//     migrations.EmitKeyInterval while it runs, so a rotated key is held before it signs (TestEmitKeyRotationWhileRunning).
//   - The publication is checked at every start and every PublicationCheckInterval while streaming
//     (pubcheck.Watch, whose doc states what a failed check and a publication gap do).
//
// The stream tells a metrics.Stats what it did (counts by source, reason and cause, the lag in time and in
// bytes, the age of the oldest unconfirmed event) and the slot's health, read from pg_replication_slots every
// pgserver.SlotHealthInterval on the ordinary connection. The session's state is in parts, each owned by one
// file (session.go): receiving WAL (stream.go, streamframe.go), the transactions received (handler.go, lag.go), the status
// updates and the stored position (ack.go), the progress inside a transaction (resume.go), publishing
// (publish.go), quarantine (burst.go).
//
// It never talks to the broker directly: it sees a Publisher.
package replication
