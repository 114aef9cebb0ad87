// Package outbox is the producer's helper: it writes one event into cdc-router's outbox table inside the
// caller's transaction (a pgx.Tx or a *sql.Tx), so that the business change and its event commit together
// or not at all. See docs/producers.md.
//
// It owns nothing but the INSERT. It guarantees:
//   - the event is written in the caller's transaction and nowhere else: Write takes a transaction, never
//     a pool or a connection, so it cannot commit an event on its own;
//   - with Event.Version zero, the event gets the aggregate's next version, one more than the highest in
//     the outbox as this transaction sees it; the outbox's unique key (aggregate_type, aggregate_id,
//     aggregate_version) decides between concurrent writers of one aggregate: one commits, every other
//     gets an error for which errors.Is(err, ErrVersionConflict) holds, and retrying its whole
//     transaction writes the version after. Committed versions are therefore distinct and consecutive
//     (pinned by a test with concurrent writers at every isolation level, over pgx and database/sql);
//   - after ErrVersionConflict the transaction is aborted on the server, like after any failed statement:
//     a caller that ignores the error cannot commit the business change without its event;
//   - a W3C traceparent (and tracestate) put in the context with WithTraceParent becomes the headers
//     traceparent and tracestate, which the router publishes as AMQP headers of the same names;
//   - an event the router would quarantine for its shape (an empty aggregate type or id, a payload that is
//     not JSON, a header name RabbitMQ reserves, an AMQP short string over 255 bytes) is refused with
//     ErrInvalidEvent before anything is sent to PostgreSQL.
//
// It never retries by itself: a conflict means the caller decided on a stale aggregate, so only the
// caller can redo the decision (see Retryable for the loop).
package outbox
