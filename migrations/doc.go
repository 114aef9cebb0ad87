// Package migrations owns the SQL that cdc-router needs in PostgreSQL: the outbox table, the router's own
// schema (stored positions, quarantined rows, snapshot progress, publication checks) and the publication.
// The files are embedded in the binary and every statement is idempotent, so `cdc-router migrate` can run
// any number of times. It never drops anything and never touches the outbox table or the publication once
// they exist; Check reports what is missing or wrong there instead, each as one sentence naming the fix.
// The router's own tables are altered only to add what a newer version needs (005: quarantine.event_id
// and value_notes, a nullable row_values), each change made only when it is missing.
//
// With Config.Partitioned (`migrate --partitioned`) the outbox is created range-partitioned by occurred_at
// and published through its root (publish_via_partition_root), and every run adds the partitions of the
// coming intervals that are missing; it refuses an existing outbox that is not partitioned. Check accepts a
// partitioned outbox whose unique key lies within the aggregate key and the partition key, and refuses a
// publication that would send its rows under the partitions' names.
//
// Apply records the version of the router's schema (SchemaVersion, the highest numbered file) in
// <schema>.schema_version (008) and refuses a schema that a newer binary recorded; CheckSchemaVersion, which
// Check and every command on the router's schema call, refuses a newer schema naming both versions and an
// older one naming migrate (TestSchemaVersionRefusesNewerAndOlder). 008 also adds the publication checks'
// identities and gaps.
//
// The function <schema>.emit (007, table-less events as logical decoding messages) is created only with
// Config.EmitFunction.
package migrations
