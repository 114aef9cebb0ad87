// Package offsets owns the acknowledgement rule and the stored position.
//
// Tracker computes the watermark: the end LSN of the newest transaction such that every event of it and of
// every earlier transaction has been confirmed by the broker. It keeps one small record per transaction in
// flight (counts, and the ordinals of its items in flight, never the events), so a transaction of 100,000
// events costs what one of a single event costs. Invariants, each pinned by a test:
//   - the watermark never passes a transaction with an unconfirmed event, and never goes back;
//   - a keepalive's WAL end is adopted only when nothing is in flight and no transaction is open;
//   - the Mark (progress inside the oldest transaction in flight, named by a TxnKey) is exactly the set of
//     that transaction's items, in stream order, that are confirmed or passed over (Pass), whatever order the
//     confirms come in: its gap-free prefix, and beyond it every confirmed item, listing the unconfirmed ones
//     between; it is never more than that, and a transaction without a key has none (FuzzTracker's reference
//     model, TestTrackerMark). The tracker lists only the items handed out and not confirmed, so its memory
//     is bounded by what is in flight, never by the size or shape of a transaction; a Mark lists at most
//     MaxOpen unconfirmed items (TestTrackerMarkIsBoundedByItemsInFlight);
//   - a replay passes over (Pass) exactly the items its resumed Mark covers, except the later items of an
//     aggregate after one of its items the Mark does not cover, so that what is published again keeps each
//     aggregate's order (TestTrackerPassKeepsAggregateOrder, FuzzTracker).
//
// Store keeps the acknowledged position in the router's table, stamped with the cluster's system
// identifier, so a restart resumes from it and a position from another cluster is refused. An advance that
// keepalives alone made is stored at most once per IdleInterval (SaveIdle), so that an idle router does not
// keep writing its own WAL; the slot itself follows every advance through the status updates. A Mark (its
// prefix, one past its last confirmed item, and the unconfirmed items between, migration 017) is
// stored in the same row write as its position, cluster and timeline (with the caller's fingerprint of its
// decoding configuration), written when only it moved, and cleared by a position without one or by a write
// that would take the position back (TestStoreKeepsTheMarkWithItsPosition).
//
// The package never talks to the replication connection or the broker: callers hand it values.
package offsets
