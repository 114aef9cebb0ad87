// Package inbox is the consumer half of cdc-router: it makes "effectively once" hold end to end for a
// consumer that keeps a projection in PostgreSQL, although RabbitMQ delivers cdc-router's events at
// least once and, after retries or replays, out of order.
//
// It owns four tables in a schema of the consumer's choosing (Migrate, MigrateSchema): inbox (every event
// id received, with a fingerprint of its content and what became of it), aggregate (per aggregate, the
// applied version and the baseline version of the last trusted snapshot), parked (events that arrived
// ahead of a gap) and failed (events that can never apply, with the reason).
//
// It guarantees, for each event, in one read-committed transaction that also holds the handler's writes:
//   - an event id is applied at most once: the inbox row is inserted with ON CONFLICT DO NOTHING and the
//     same id again is a Duplicate (same fingerprint, no effect) or a Conflict (different fingerprint:
//     never applied, recorded in failed with both fingerprints, and acknowledged);
//   - the versions of one aggregate are applied in order, each exactly once: version applied+1 runs the
//     handler; a version at or below the applied or baseline version is Stale (recorded, no effect); a
//     version beyond a gap is Parked (or, with policy Requeue, rolled back and requeued), and parked
//     events are applied in order in the transaction that closes their gap;
//   - nothing is marked processed unless the business write committed with it: any error rolls back the
//     inbox row too, so a redelivery is never blocked by an "already processed" mark;
//   - Consume acknowledges a delivery only after its transaction committed, and requeues it otherwise;
//   - Repair writes a trusted full snapshot only over the version the repairer observed and only below
//     the snapshot's version, and records that version as the baseline.
//
// It never acknowledges before commit, never applies an event whose id it has seen with other content,
// never treats a parked event as applied, never logs a payload, and never makes an external side effect
// (an e-mail, an SMS, a call to another service) exactly-once: that takes the next hop's idempotency key.
// It imports nothing from the router's pipeline; it reads only the message format the router publishes.
package inbox
