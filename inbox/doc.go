// Package inbox is the consumer-side transaction of cdc-router: it applies each event to a projection
// in PostgreSQL at most once per event id and in version order per aggregate, in the transaction of the
// projection's own write, and keeps the records that make it so and their repair. That makes
// "effectively once" hold end to end, although RabbitMQ delivers cdc-router's events at least once and,
// after retries or replays, out of order. Reading the events from RabbitMQ is package inbox/runner's.
//
// It owns seven tables in a schema of the consumer's choosing (Migrate, MigrateSchema), in the projection's
// database (the inbox row commits with the handler's writes): inbox (every event
// id received, with a fingerprint of its content and what became of it), aggregate (per aggregate, the
// applied version and the baseline version of the last trusted snapshot), parked (events that arrived
// ahead of a gap), failed (events that did not apply, with the reason), attempts (failed attempts of
// events not yet applied), requests (repairs an operator filed without the handler, which a running
// runner carries out: Admin, ServeRequest, cdc-router inbox) and skipped (versions ResolveParked gave
// up). Every record belongs to one consumer,
// named by Config.Consumer, so several projections can share a schema.
//
// It guarantees, for each event and consumer, in one read-committed transaction that also holds the
// handler's writes:
//   - consumers are independent: every record and every query is keyed by the consumer name, so one
//     projection never sees another's events as duplicates (two consumers on one schema each apply all
//     1,000 events of a test);
//   - an event id is applied at most once: the inbox row is inserted with ON CONFLICT DO NOTHING and the
//     same id again is a Duplicate (same fingerprint, no effect) or a Conflict (different fingerprint:
//     never applied, recorded in failed with both fingerprints, and acknowledged);
//   - the versions of one aggregate are applied in order, each exactly once: version applied+1 runs the
//     handler; a version at or below the applied or baseline version is Stale (recorded, no effect); a
//     version beyond a gap is Parked (or, with policy Requeue, rolled back and requeued), and parked
//     events are applied in order in the transaction that closes their gap;
//   - a full-state event (Event.FullState, header full_state) newer than the applied version applies
//     even across a gap: the parked events at or below it become stale and those after it apply;
//   - nothing is marked processed unless the business write committed with it: any error rolls back the
//     inbox row too, so a redelivery is never blocked by an "already processed" mark;
//   - no transaction waits for a lock longer than Config.LockTimeout, so a consumer frozen while holding
//     an aggregate's row lock stalls that aggregate only, and only until the waiter's transient error;
//   - an event whose transaction keeps failing is counted durably, per consumer and event id, and on its
//     Config.MaxAttempts-th counted failure is recorded in failed and acknowledged; a success clears the
//     count; RetryFailed and ResolveFailed settle a failed event and unblock its aggregate;
//   - RetryParked applies a parked event only when its gap has closed, and ResolveParked skips the
//     missing versions before it only when asked, logging and recording the skipped range; a skipped
//     version that arrives later is recorded in failed (reason skipped) with a warning naming the
//     request, never taken for a stale duplicate (TestRunnerVersionArrivingAfterSkipIsFailed);
//   - a request is carried out at most once, never after it was cancelled or expired (its filer gave up
//     waiting: TestRunnerExpiredResolveIsNotCarriedOut), and a resolve of a parked event is refused,
//     changing nothing, when its premise no longer holds: the event is no longer parked, or a missing
//     version arrived since it was filed (TestRunnerResolveRefusedWhenTheMissingVersionArrived);
//   - Repair writes a trusted full snapshot only over the version the repairer observed and only below
//     the snapshot's version, and records that version as the baseline;
//   - New refuses a schema whose tables are missing or out of date, naming the fix (Check,
//     TestNewRefusesMissingTables); a database that does not answer yet is not refused: New returns the
//     Processor, Process runs Prepare first, and a runner waits for it (Ready, Prepare).
//
// It never acknowledges before commit, never applies an event whose id it has seen with other content,
// never treats a parked event as applied, never logs a payload, never takes a table lock when migrating
// an up-to-date schema, and never makes an external side effect (an e-mail, an SMS, a call to another
// service) exactly-once: that takes the next hop's idempotency key. It imports nothing from the router's
// pipeline and no broker client: package inbox/runner reads cdc-router's messages from RabbitMQ
// (Runner, Consume, DecodeDelivery) and hands each to Process as an Event.
package inbox
