// Package mapping reads an outbox table of another shape than cdc-router's own: Debezium's outbox event
// router options (run --config, ParseMapping, LoadMapping) resolved against a table's columns (Resolve)
// and the mapping of each row to a cdc.Event with cdc.Mapped (Relation.Map): routing key and exchange,
// typed headers and properties, content type, timestamp, tombstone, column:field JSON fields, envelopes.
// The stream (decode, per Relation message and insert) and the readers of rows with SELECT
// (decode.RowMapper: snapshot, backfill, quarantine replay) map a row by this one code, so a row read and
// the same row streamed become the same event.
//
// It owns the option names and their defaults (mapping.go), the Java properties file reader
// (properties.go), the route.topic.regex translation from Java's regex dialect with the constructs RE2
// reads differently refused (javaregex.go, routing.go), and the row rules (mapped_row.go, jsonfield.go,
// jsonbody.go, properties_mapped.go).
//
// It guarantees, each pinned by a test (those named decode's run the Decoder over a mapped table):
//   - a file text either is refused with the option and the fix or gives a Mapping whose routing never
//     panics (FuzzParseMapping); a Java regex construct that RE2 would read differently is refused
//     naming it (TestJavaRegexConstructs), the replacement follows Debezium's (TestTopicRoute), and the
//     file is read as Java reads a properties file (TestParseProperties);
//   - a missing or mistyped mapped column is a problem of Resolve, named by its option, never a per-row
//     check (decode's TestMappingDrift); an option left at its default never refuses a table for a
//     column of that name and another type: the column is left unused (decode's TestMappingOptions);
//   - a row with a NULL id or routing value, or a NULL payload without tombstones, and a column:field,
//     amqp.headers.json, amqp.envelope.json or amqp.validate.json value that does not hold, is a
//     RowError naming the option (decode's TestMappingQuarantinesRows, FuzzMappedInsert), in the stream and
//     the snapshot alike (one Map);
//   - memory is bounded: a column over Limits.ValueLimit, or a payload over Limits.MaxPayloadBytes, is a
//     RowError from its length, never copied or converted whole (TestMapBoundsValues).
//
// It never reads the replication stream, never touches a connection, and never drops a row: only a
// tombstone with amqp.tombstone=drop, the user's explicit choice, maps to nothing.
package mapping
