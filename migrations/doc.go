// Package migrations owns the SQL that cdc-router needs in PostgreSQL: the outbox table, the router's own
// schema (stored positions, quarantined rows, snapshot progress) and the publication. The files are embedded
// in the binary and every statement is idempotent, so `cdc-router migrate` can run any number of times.
// It never drops or alters what already exists; Check reports what is missing or wrong instead.
package migrations
