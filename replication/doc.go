// Package replication owns the replication connection and the stream's lifecycle: it checks the slot and
// the stored position before anything else, creates a missing slot (permanent, pgoutput) only when no
// position was ever stored, starts replication from the stored position, hands every XLogData to the
// decoder and every event to the publisher, answers keepalives that ask for a reply at once, and sends
// standby status updates on a timer and when the acknowledged position moves (at most one such update
// per 10 ms: at moderate rates it moves with almost every confirm).
//
// Invariants, each pinned by a test:
//   - Only this package touches the replication connection; one goroutine owns it.
//   - The only LSN ever reported as flushed is the offsets.Tracker watermark: the end of a transaction whose
//     events, and those of every earlier transaction, were all confirmed. It is never zero and never goes back.
//   - Backpressure (a full publish window) stops reading WAL, never the status updates.
//   - A slot that is missing or lost while a position is stored, or a position stored by another cluster,
//     is refused within seconds: the stream never silently skips events.
//   - On any publish failure the whole stream restarts in-process from the acknowledged position, so every
//     unconfirmed event is published again in its original order.
//   - A stop ends within the shutdown timeout of its request, whatever the stream waits for then (a full
//     publish window, confirms that never come, the publisher's close).
//   - A router that finds its slot held by another router stands by (StateStandby, retried every second),
//     which is neither a failure nor a restart.
//   - Every connection accepts only a primary (pg_is_in_recovery() is false); while only standbys answer
//     (a failover in progress) the router looks for a primary every second.
//   - A promoted standby (the same system identifier, a later timeline) is streamed from only through the
//     slot it has (a failover slot's synchronized copy), never a new one; the timeline is recorded with the
//     position, and a stored position past the end of its timeline on that server is refused.
//   - A window in which an outbox table was out of the publication, however short (between two checks, or
//     while the router was stopped), is never silent: each publication check compares the tables'
//     membership identities with the last sound check's (publication_checks.identities), and a change is
//     a publication gap, logged as an ERROR with the backfill of its window, unready, and refused at the
//     next start until that backfill has run (pubgap.go; cmd/cdc-router/pubgap_test.go).
//
// Stats is what the stream did, for the health endpoints, the progress line and the metrics (Stats.Register):
// counts by source, reason and cause, the lag in time (the age of the commit of the oldest received
// transaction not yet acknowledged, 0 when none is) and in bytes, the age of the oldest unconfirmed event,
// and the slot's health, read from pg_replication_slots every SlotHealthInterval on the ordinary connection.
//
// It never talks to the broker directly: it sees a Publisher.
package replication
