// Package check is the checker of the randomized invariant harness (chaos): the History a run records, the
// invariants stated once (check.go lists them; the other files hold the longer ones), and the reports a
// run prints (coverage, the faults as applied, the shortened history of a failure). It knows nothing of
// how the History was made, so it is tested on hand-made histories (check_test.go).
//
// Invariants, each pinned by a test in check_test.go or features_test.go:
//  1. Every committed row is delivered or quarantined with a reason; a missing row is reported as lost
//     when every slot acknowledged a position past its commit, as stuck otherwise. A valid row
//     quarantined holds only for a documented refusal inside its fault's window (a per-topic exchange
//     taken away, a queue-length policy's nack: ownbroker_test.go).
//  2. The first deliveries of each aggregate are in version (commit) order, backfill copies aside.
//  3. No period longer than the stall bound with committed rows pending and no new delivery, unless every
//     /readyz sample of that period is 503 and a log line at WARN or ERROR names the cause (an
//     ACCESS_REFUSED or PostgreSQL refusal line only for a stall inside its revocation's window and the
//     bound after it).
//  4. A duplicate delivery follows a fault or a backfill that may cause it (SIGTERM alone does not), and
//     the duplicates are bounded by what those events can replay.
//  5. A router never exits on its own more than a few times (no restart loop; exits on the refusal of a
//     right revoked meanwhile are the documented refusal), and no log line carries a payload.
//  6. A reset without --force, run while its router is ready, refuses.
//  7. No message of a role without EXECUTE on emit is published, one is quarantined as unauthenticated,
//     and that role's calls of emit are refused (features_test.go).
//  8. A broker restart, memory alarm, SIGKILL, queue-length policy or revoked right ends its stall: rows pending at its end arrive within the stall
//     bound, unless another fault follows (features_test.go).
//  9. A record quarantine replay marks replayed, and a row the operator fixed and replayed, arrived with
//     x-replayed, and nothing arrives replayed that no record has (features_test.go).
//  10. While a right of the routers' user is revoked (RabbitMQ's permissions, PostgreSQL's REPLICATION or
//     SELECT), each line naming its refusal names the grant, one is an ERROR, and its router answers
//     /readyz 503 until the restore (ownbroker_test.go).
//  11. With a hot standby, one router active at a time: never two processes of a slot answering
//     /readyz?active=1 with 200 in state snapshot within the lease's margin of each other (copying at once),
//     nor with 200 in two samples in a row (a split brain), never none past the takeover bound
//     unless an outage explains it; the stall rule reads /readyz?active=1 per slot and never excuses such a
//     period (standby_test.go).
//  12. A reset run while an open and a prepared transaction that wrote events were in flight exits 1: naming
//     both when they were still in flight at its end, for the unpublished events they committed when they
//     committed during its --wait (inflight_test.go).
package check
