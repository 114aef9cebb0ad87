// Package e2e holds the end-to-end tests of what cdc-router promises: each starts the router's binary
// (built once per test binary by internal/testenv, with -race as CDC_ROUTER_RACE says) against a
// PostgreSQL cluster the tests start and the machine's RabbitMQ, and checks what a user would check: what
// the consumer received, what the slot acknowledged, what the router said. It has no code of its own
// outside its tests. Where to look, by guarantee:
//
//   - nothing lost across crashes and stops: crash, pgrestart, shutdown, brokercut, txnprogress, bigmessage;
//     stops bounded by --shutdown-timeout during the snapshot and on PostgreSQL's waits: stopbound
//   - order and properties: stream, order, hotaggregate (a run of one aggregate, --aggregate-window), encoding, quoting, traffic, quorum, addresses, tls
//   - refusals that name the fix: setup, setuppath, usererror, brokerperm, schemaversion, pubgap
//   - poison rows, drift, broker refusals and the quarantine: poison, drift, brokerrefusal, refusal,
//     quarantine, mapped_quarantine, operator (reset, backfill, quarantine commands)
//   - snapshots and backfills: snapshot, snapmerge, mapsnap, memory, snapshotgrace (a long snapshot's faults)
//   - several tables, mapped tables, partitions, shards: multitable, mapping, mapping_rate, mapped_bytea,
//     mapped_exchange, exchanges_named (what migrate and the log say of them), partition, partitioned,
//     shard, shard_status (status and reset of a shard), recipes (the migration guide's recipes),
//     debezium_cutover (the guide's cutover from a running Debezium connector)
//   - emitted events and who may create them: emit, emitauth, producer, docsql (the docs' setup SQL)
//   - standby routers, failover slots, PostgreSQL 18: standby, failover, failover_snapshot (a promotion during
//     the initial snapshot), pg18
//   - the consumer half through faults: accounts, effectively_once, effectively_once_check; partitioned
//     consumer groups: consumergroup_faults (the short test, in make test), consumergroup (build tag
//     consumergroups, make test-consumer-groups), consumergroup_cluster (tags cluster consumergroups)
//   - observability: metrics, status_json, progress, idle
//   - a RabbitMQ cluster (build tag cluster, make test-cluster): cluster
//   - benchmarks (make bench-e2e, make bench-shards): bench, shard_bench
//
// The harness (harness_test.go) gives each test its own database, slot, exchange and queue. The tests of
// the command line's own flags and output are in cmd/cdc-router; the randomized invariant harness is chaos/.
package e2e
