// Package route publishes outbox events to RabbitMQ and tells the caller, per event, when the broker has
// taken responsibility for it.
//
// What it owns: the AMQP connection of the router (its own, never shared), the topology it publishes to
// (a durable topic exchange whose alternate exchange is a durable fanout exchange feeding a durable queue
// of the same name), the mapping of a cdc.Event to an AMQP message, and Lanes confirm-mode channels.
// Each lane is one channel, written by one goroutine and confirmed by another; an aggregate
// (aggregate_type, aggregate_id) always goes through the same lane.
//
// What it guarantees:
//   - Messages of one lane are published in the order of the Publish calls, so the events of one aggregate
//     reach every queue in the order the caller handed them over.
//   - A lane keeps at most Window messages unconfirmed; Publish blocks while the window is full.
//   - done is called exactly once per event, from a route goroutine, only after the broker confirmed the
//     message positively and did not return it (basic.return, matched by message id within the lane).
//     A nack, a return, a channel or connection close, or a confirm that does not arrive within
//     ConfirmTimeout puts the Router into a failed state; after that, done is never called again for any
//     event. The caller then closes the Router and restarts its stream from its last acknowledged position,
//     which is how no event is lost and the order per aggregate holds (modulo duplicates).
//
// What it never does: retry or republish (the caller restarts), reconnect on its own (amqp091's
// Config.Recovery stays nil: its recovery restarts delivery tags and nacks the window silently), log a
// payload or a password, or let an amqp091 type appear in its API.
package route
