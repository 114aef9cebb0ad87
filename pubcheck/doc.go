// Package pubcheck watches the one thing the replication stream cannot show: that the publication still
// carries every outbox table's inserts. A table out of the publication sends nothing at all on the stream,
// so the router checks the catalog at start and every Config.Interval while it streams (Watch), and records
// each check in the router's publication_checks table.
//
// Invariants, each pinned by a test:
//   - A failed check makes the router unready (metrics.Stats.Problem), is logged as an ERROR at each check and
//     recorded, so that the refusal at the next start names the rows to backfill (WithBackfillHint).
//   - A window in which an outbox table was out of the publication, however short (between two checks, or
//     while the router was stopped), is never silent: each sound check compares the tables' membership
//     identities with the last sound check's (publication_checks.identities), and a change is a publication
//     gap, logged as an ERROR with the backfill of its window, unready, and refused at the next start until
//     that backfill has run and cleared it (ClearPublicationGaps; TestGapBackfill, TestChangedTables, end to
//     end cmd/cdc-router/pubgap_test.go).
//   - The backfill a gap names covers its window widened to whole seconds: more duplicates, never a row short.
//
// It reads the catalog and the router's own schema over an ordinary connection, and never the stream.
package pubcheck
