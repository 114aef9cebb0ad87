// Package chaos is the randomized invariant harness (issue 21): a generator and a checker kept apart, as
// Jepsen does.
//
// It owns three things and nothing else:
//   - the generator (gen.go): from one seed, a Setup (tables, shards, queue types, lanes, an initial
//     snapshot, rows the router must refuse) and a Schedule of operations and faults. Every choice comes
//     from the seed, so a seed is a reproducible run. Fault kinds known to be broken on main are generated
//     only when named in -chaos.known-broken (knownBroken lists each with its finding).
//   - the runner (run.go and the files it calls): runs the router binary as subprocesses against a
//     PostgreSQL cluster of its own (internal/testenv) behind TCP proxies, and the shared RabbitMQ, applies
//     the schedule, and records the History: rows written (the table's final content is the truth of what
//     committed), deliveries seen by a consumer, the quarantine table, the routers' log lines, /readyz
//     samples, and each fault and operator command with its time.
//   - the checker (check.go lists the invariants, stated once; check_*.go hold the longer ones): judged
//     over the whole History. It knows nothing
//     of how the History was made, so it is tested on hand-made histories (check_test.go).
//
// Invariants, each pinned by a test in check_test.go:
//  1. Every committed row is delivered or quarantined with a reason; a missing row is reported as lost
//     when every slot acknowledged a position past its commit, as stuck otherwise.
//  2. The first deliveries of each aggregate are in version (commit) order, backfill copies aside.
//  3. No period longer than the stall bound with committed rows pending and no new delivery, unless every
//     /readyz sample of that period is 503 and a log line at WARN or ERROR names the cause.
//  4. A duplicate delivery follows a fault or a backfill that may cause it (SIGTERM alone does not), and
//     the duplicates are bounded by what those events can replay.
//  5. A router never exits on its own more than a few times (no restart loop), and no log line carries a
//     payload.
//  6. A reset without --force, run while its router is ready, refuses.
//
// The generator's plan is a function of the seed and the options alone (TestGenerateIsAFunctionOfTheSeed);
// kinds of knownBroken appear only when asked for (TestKnownBrokenKindsOnlyWhenAsked).
//
// The harness never changes a broker-wide setting of the shared RabbitMQ: it only declares and deletes
// objects named after its own run.
package chaos
