// Package chaos is the randomized invariant harness (issue 21): a generator and a checker kept apart, as
// Jepsen does. The generator is chaos/gen, the checker chaos/check; this package is the runner between
// them and the test that drives seeds (TestChaos). chaos/record writes the History as it happens (the
// consumer, the log lines, the /readyz samples, the servers' final state) and chaos/procs supervises
// the router processes.
//
// It owns the runner and nothing else: it builds one seed's world (a database of its own on a PostgreSQL
// cluster of its own, internal/testenv, behind TCP proxies, and the shared RabbitMQ or, for the seeds
// whose plan says so, a RabbitMQ node it starts itself), starts the routers with the plan's flags, runs
// the writers and applies the schedule gen.Generate made, and puts into the check.History the rows
// written (the table's final content is the truth of what committed) and each fault and operator command
// with its time. It judges nothing itself: check.Check does, over the whole History.
//
// Invariants of the runner:
//  1. A fault hits only the routers: writers, commands and the consumer connect to the servers directly.
//  2. The harness never changes a broker-wide setting of the shared RabbitMQ: it only declares and deletes
//     objects named after its own run. Broker restarts, memory alarms, SIGKILLs, queue-length policies and
//     permission changes are applied only to a node the harness started itself (own node name, ports and
//     directories), which it stops at the end.
//  3. The operator it plays (operator.go) runs only the commands a router's log line names.
package chaos
