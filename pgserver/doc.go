// Package pgserver is what the router knows of PostgreSQL as a server: how to connect to it (ordinary,
// replication and snapshot reader connections, TLS files, primaries only, every attempt bounded), how to
// explain its refusals in one sentence that names the fix, START_REPLICATION's options, and its replication
// slots: inspect, create, whether and where a stream may start from one (DecideStart), their health (read
// while a stream runs by SlotWatch, whose failed reads are logged and never stop the stream unless they
// closed the connection), timelines and failover settings.
//
// Invariants, each pinned by a test:
//   - Every connection accepts only a primary (pg_is_in_recovery() is false); a target_session_attrs that
//     asks for a standby is refused, and a connection that found only standbys wraps ErrStandby so that the
//     stream retries it as a failover in progress (TestRequirePrimary).
//   - No connection attempt to a PostgreSQL that accepts TCP but does not answer lasts longer than its bound
//     (run's --pg-timeout, DefaultPGTimeout for the other commands; a shorter connect_timeout in the URL wins),
//     and its error names the server and the bound, never the password
//     (replication's TestConnectionAttemptsEndWithinTheBound). No group of start-up checks waits longer than
//     its bound either (SetupStep), and a wait of the stream that timed out is named as the server that
//     stopped answering (Stalled): both a *Retryable (TestSetupStepBoundsAStepThatDoesNotAnswer).
//   - A long copy (the initial snapshot, a backfill) whose server accepts TCP but does not answer is ended
//     within about 1.5 × its bound by Silence's probe, with a *Retryable naming the server; a probe that is
//     answered, even with an error, leaves the copy alone (initial's TestProbeTellsSilenceFromAnAnswer;
//     end to end e2e's TestSilentPostgreSQLDuringTheSnapshotIsBounded and ...DuringABackfillIsBounded).
//   - A certificate or key file that the URL names is read before any connection is tried; a problem with it
//     is one sentence naming the file and its parameter (TestTLSFilesCheckNamesTheFileAndTheParameter).
//   - Errors a user can fix (a password, pg_hba.conf, wal_level, REPLICATION, TLS, max_replication_slots) are a
//     *cdc.Fatal naming the fix; transient ones a *Retryable that names the server.
//   - A slot creation that waits for running transactions is reported, with those transactions, for as long
//     as it waits (TestSlotCreationIsReportedForAsLongAsItWaits).
//   - A stored position past the end of its timeline on this server is refused (TestTimelineEnd; end to end
//     e2e's failover tests).
//   - DecideStart trusts a stored position only on the cluster that stored it, and refuses a slot that is
//     missing (while a position is stored), invalidated, of another database or of another plugin, naming the
//     fix; it starts from the later of the slot's confirmed_flush_lsn and the stored position (TestDecideStart).
//     A slot missing on a promoted standby (a later timeline) is refused with why and how to keep it through
//     the next failover (TestDecideStartAfterPromotion). PlanStart reads the slot and the stored position
//     for it, and refuses a slot another process streams from (ErrSlotBusy) before anything else is done
//     (e2e's TestStandbyTakesOverAfterSIGKILL).
//   - START_REPLICATION's publication_names names the publication as a quoted identifier, so its case and
//     commas survive (TestPublicationNamesOptionQuotesTheName); a refusal of START_REPLICATION or of the
//     stream is explained once (ExplainStart, ExplainStream): a slot in use wraps ErrSlotBusy, what the
//     operator must fix is a *cdc.Fatal naming it.
//
// It never reads the replication stream or sends a standby status update: package replication owns the
// replication connection. ConnectReplication opens it for replication, and the slot commands here
// (CREATE_REPLICATION_SLOT, ALTER_REPLICATION_SLOT, TIMELINE_HISTORY) run on it only when the stream's
// goroutine calls them, before START_REPLICATION.
package pgserver
