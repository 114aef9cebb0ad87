// Package pgtext holds what decode and decode/mapping both read PostgreSQL's text values with: the type
// OIDs of the built-in types, the bounded parsers of integers, uuids, JSON and timestamptz text, one
// TupleData column (Value), the names of tables and types, and RowError, why a row cannot become an event.
// It imports nothing of the router.
package pgtext
