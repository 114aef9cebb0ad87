// Package testenv starts the real servers that integration tests run against: a throwaway PostgreSQL
// cluster with wal_level=logical (initdb into a temporary folder, its own port, run as the postgres user
// when the tests run as root), a check that RabbitMQ is reachable, per-test databases and names, and a TCP
// proxy that can stall or cut one connection; for failover tests, a PostgreSQL 17+ primary with a physical
// standby that synchronizes failover slots (Pair, Promote), and the pinned binaries of any supported major
// version (PostgresBin, which runs fetch-postgres.sh); for the few tests that need a broker-wide RabbitMQ
// setting, SetMemoryHighWatermark, which restores the value it found, and BrokerSettings to check that
// something left them alone; and a RabbitMQ node of a test's own (StartRabbitMQNode: own name, ports and
// directories, beside the shared broker), which a test may restart or give a memory alarm. A missing server
// fails the test; nothing here ever skips.
package testenv
