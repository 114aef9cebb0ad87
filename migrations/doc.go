// Package migrations owns the SQL that cdc-router needs in PostgreSQL: the outbox table, the router's own
// schema (stored positions, quarantined rows, snapshot progress, publication checks) and the publication.
// The files are embedded in the binary and every statement is idempotent, so `cdc-router migrate` can run
// any number of times. It never drops anything and never touches the outbox table or the publication once
// they exist; Check reports what is missing or wrong there instead, each as one sentence naming the fix.
// The router's own tables are altered only to add what a newer version needs (005: quarantine.event_id
// and value_notes, a nullable row_values; 010: the positions' mark columns, progress inside a transaction; 017: mark_seen and mark_open, that progress
// as the set of confirmed items; 018: the refusal columns, the stream's safety net kept with the slot; 019: the routers' window_limit and inflight_events, what a router publishes now),
// each change made only when it is missing, and Check refuses a schema without them.
//
// With Config.Partitioned (`migrate --partitioned`) the outbox is created range-partitioned by occurred_at
// and published through its root (publish_via_partition_root), and every run adds the partitions of the
// coming intervals that are missing; it refuses an existing outbox that is not partitioned. Check accepts a
// partitioned outbox whose unique key lies within the aggregate key and the partition key, and refuses a
// publication that would send its rows under the partitions' names.
//
// The shards' row filters (ApplyShards) put every row in exactly one shard, a NULL key in shard 0, and
// hash the key under COLLATE "C" whatever the columns' collations; Check evaluates a shard's filter on
// sample keys with the table's own collations and NULLs, and ApplyShards replaces an earlier release's
// filter in place only when no non-NULL key changes shard (TestEveryRowMatchesOneShardNullKeysAndCollations).
// Apply records the version of the router's schema (SchemaVersion, the highest numbered file) in
// <schema>.schema_version (008) and refuses a schema that a newer binary recorded; CheckSchemaVersion, which
// Check and every command on the router's schema call, refuses a newer schema naming both versions and an
// older one naming migrate (TestSchemaVersionRefusesNewerAndOlder). 008 also adds the publication checks'
// identities and gaps.
//
// 015 adds <schema>.routers, where each running router records what it runs with and how it is doing
// (package registry), and grants on it to each role granted UPDATE on positions (read and write) or SELECT
// (read), since the documented grants ON ALL TABLES ran before it existed; every run grants only what such
// a role lacks there (TestRoutersGrantedToTheRolesOfPositions).
//
// The function <schema>.emit (007, table-less events as logical decoding messages) is created only with
// Config.EmitFunction, with the key it signs with in <schema>.emit_keys. It guarantees, on every run
// (TestEmitFunctionHardening): emit is SECURITY DEFINER with search_path pg_catalog, pg_temp and every call
// schema-qualified, so functions or operators a caller owns never run in it; EXECUTE on it is revoked from
// PUBLIC and granted to Config.EmitRoles, and a run without roles keeps those granted before; the key is
// created once, kept by every run, and readable by no role but the owner's and those granted it; an
// EmitRoles role that does not exist or can read the key is refused naming the fix; a rotated key
// (Config.RotateEmitKey) signs only EmitKeyDelay later. The MAC it computes in SQL is decode.EmitMAC.
// LoadEmitKeys refuses, naming the fix, a router that cannot read a key. EmitKeyWatch reloads the keys while a
// stream runs, at least every EmitKeyInterval, well within EmitKeyDelay, so a rotated key is held before it
// signs; a reload that fails keeps the keys loaded (TestEmitKeyWatch; end to end e2e's
// TestEmitKeyRotationWhileRunning).
//
// 016 retires keys instead of deleting them: RetireEmitKeys (`migrate --emit-function --retire-emit-keys`)
// sets retired_at on every key older than the newest only once the newest signs and no prepared
// transaction, and no open one with a transaction id that began before the newest key's not_before, is
// left in the database (it names them; with a wait it waits for them, bounded and cancellable); a retired
// key never signs, emit signing with the newest active key instead of failing, and LoadEmitKeys returns it
// for EmitKeyGrace, after which migrate deletes it (TestRetireEmitKeysWaitsForOlderTransactions,
// TestEmitSignsAfterItsKeyIsRetired). 016 also puts emit_keys under row level security, its rows shown only
// to the roles granted SELECT on it, so pg_read_all_data reads none of them nor the key columns' statistics;
// EmitKeyReaders names the login roles that still can (TestEmitKeysHiddenFromReadAllData).
package migrations
