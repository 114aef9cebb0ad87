// Package offsets owns the acknowledgement rule and the stored position.
//
// Tracker computes the watermark: the end LSN of the newest transaction such that every event of it and of
// every earlier transaction has been confirmed by the broker. It keeps one small record per transaction in
// flight (a count, never the events), so a transaction of 100,000 events costs what one of a single event
// costs. Invariants, each pinned by a test:
//   - the watermark never passes a transaction with an unconfirmed event, and never goes back;
//   - a keepalive's WAL end is adopted only when nothing is in flight and no transaction is open;
//   - the Mark (progress inside the oldest transaction in flight, named by a TxnKey) counts only the
//     contiguous prefix of that transaction's items, in stream order, that are confirmed or resumed past,
//     whatever order the confirms come in; it is never more than that, and a transaction without a key has
//     none (FuzzTracker's reference model, TestTrackerMark). It remembers at most DefaultAheadLimit items
//     confirmed beyond a gap; past that a transaction's Mark stops growing, and the watermark is unchanged
//     (TestTrackerMarkWithFullAhead): memory never grows with the size of a transaction.
//
// Store keeps the acknowledged position in the router's table, stamped with the cluster's system
// identifier, so a restart resumes from it and a position from another cluster is refused. An advance that
// keepalives alone made is stored at most once per IdleInterval (SaveIdle), so that an idle router does not
// keep writing its own WAL; the slot itself follows every advance through the status updates. A Mark is
// stored in the same row write as its position, cluster and timeline (with the caller's fingerprint of its
// decoding configuration), written when only it moved, and cleared by a position without one or by a write
// that would take the position back (TestStoreKeepsTheMarkWithItsPosition).
//
// The package never talks to the replication connection or the broker: callers hand it values.
package offsets
