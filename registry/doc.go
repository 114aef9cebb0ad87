// Package registry owns <schema>.routers (migration 015): the record each running router process keeps of
// what it runs with (slot, publication, tables, the mapping files' text, message prefix, shard, exchange
// and its whole effective configuration, secrets masked by the caller) and how it is doing (its role as
// package metrics names it, heartbeat, last error, stop), so that `cdc-router status` and the other
// operator commands can read it instead of being told again. Keep writes one process's record; List, Of
// and Speaker read them; Live says whether a record's process was heard from within Stale.
//
// Guarantees, each pinned by a test:
//   - Keep writes the whole record at start, refreshes the role, heartbeat and last error every
//     HeartbeatInterval and within about a second of a role change, and marks the record stopped when its
//     context ends, then returns (TestKeepWritesTheRecordAndFollowsTheRole).
//   - Keep never stops or blocks the router: a write that fails (no right, no table yet, PostgreSQL down, a
//     cut connection) is retried at the next beat on a new connection if needed, and logged at WARN once per
//     distinct error, naming the GRANT or migrate, and at INFO when writes succeed again
//     (TestKeepWithoutRightsWarnsOnceNamingTheGrant, TestKeepWithoutTheTableWritesOnceItExists).
//   - At its first write Keep deletes the slot's records of processes that stopped or were silent for a
//     day, never a live process's record (TestKeepDeletesOnlySupersededRecords).
//   - Of, and Speaker, speak for a slot with a live record, one that holds the slot (streaming or copying
//     the initial snapshot) first, else the most recently started; liveness is judged by the database's
//     clock, the one heartbeats are written with (TestOfPrefersALiveStreamingRecord, TestSpeaker).
//
// It never touches the replication connection, the slot, the stored positions or the broker, and it
// decides nothing about the stream: a record says what a process reported, nothing more.
package registry
