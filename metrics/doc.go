// Package metrics is what the router did since the process started, read by the health endpoints, the
// progress line and Prometheus: Stats (counts by source, reason and cause, the state, the lag in time and
// bytes, the age of the oldest unconfirmed event, the initial snapshot's progress, the slot's health), its
// collector (Stats.Register), the commit-to-confirm histogram, the in-flight record of a session's events
// (Flight) and the progress line (ProgressLog). The metrics of other stages can join it here.
//
// Invariants, each pinned by a test:
//   - Stats is safe for concurrent readers and writers, and its zero value is ready to use.
//   - The collector passes Prometheus's lint, writes the state as an enum and exports the slot's health only
//     once it was read and never in standby, so only one router reports a slot (TestStatsMetrics).
//   - The lag in time is the age of the commit of the oldest received transaction not yet acknowledged (0
//     when none is: an idle database is not lag), or, when longer, the walsender's silence once it passes the
//     --pg-timeout bound; not before the first stream, not in standby (TestLagGrowsWhileTheWalsenderIsSilent;
//     the session's bookkeeping: replication's TestLagFollowsTheOldestUnacknowledgedCommit).
//   - While starting or restarting, Waiting names what the router waits for (TestWaitingSaysWhatTheRouterWaitsFor).
//   - The age of the oldest unconfirmed event follows confirms in any order (TestFlightOldest).
//
// It records what it is told and decides nothing: the stream (package replication) and the initial
// snapshot tell it what happened.
package metrics
