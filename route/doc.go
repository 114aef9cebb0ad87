// Package route publishes outbox events to RabbitMQ and tells the caller, per event, when the broker has
// taken responsibility for it.
//
// What it owns: the AMQP connection of the router (its own, never shared), the topology it publishes to
// (a durable topic exchange whose alternate exchange is a durable fanout exchange feeding a durable queue
// of the same name), and Lanes confirm-mode channels. The mapping of a cdc.Event to an AMQP message and
// the checks of what RabbitMQ would refuse are route/message's; route adds the connection's frame_max.
// Each lane is one channel, written by one goroutine and confirmed by another; an aggregate
// (aggregate_type, aggregate_id) always goes through the same lane, and has at most one event
// unconfirmed in it (hold.go).
//
// What it guarantees, each pinned by a test:
//   - The events of one aggregate are written in the order of the Publish calls, so they reach every queue
//     in the order the caller handed them over, and at most AggregateWindow of them (one by default) are
//     unconfirmed at a time: while that many earlier events of its aggregate are unconfirmed, an event is
//     held aside, not written, and it is written once one of them is confirmed positively and not
//     returned. So with the default, when the broker refuses an event (a nack, a return, a channel close,
//     a confirm timeout), no later event of its aggregate has been written, and after the caller's restart
//     from its acknowledged position the aggregate's events are first delivered in order (ADR 0006); with
//     AggregateWindow N, up to N-1 later events may have been (ADR 0009), once per refusal: a Dialer
//     remembers an aggregate whose event its Router saw refused (a nack, a return, a close attributed to
//     its publish) and the Routers it dials next give that aggregate one unconfirmed event until one of its
//     events is confirmed, so the caller's retries do not write those N-1 again
//     (TestLastingRefusalDoesNotRepublishTheWindow). Events of other aggregates go on
//     being written meanwhile: the write order of a lane is the Publish order within each aggregate, not
//     across aggregates. One aggregate moves at AggregateWindow events per confirm round trip.
//   - A held event takes no slot of its lane's window (it takes over its predecessor's when that one is
//     confirmed), so a run of one aggregate longer than the window does not stop the other aggregates;
//     at most MaxHeld events are held across the Router, and their bytes count in MaxInflightBytes.
//   - An event RabbitMQ would refuse deterministically is never published: message.Check (static, no connection
//     needed) and Publish (which adds the connection's negotiated frame_max) refuse it with an error
//     wrapping ErrInvalidEvent, which is cdc.ErrUnpublishable, naming the reason, and the Router goes on.
//     Refused: a routing key, message id or header name over 255 bytes (AMQP short strings); an empty
//     outbox id; a headers column that is not a JSON object; the header names RabbitMQ reserves (CC and
//     BCC exactly, as RabbitMQ matches them case-sensitively: sender-selected distribution would route
//     copies elsewhere, or close the channel with 406 for a non-array; x-death, x-first-death-* and
//     x-last-death-*: the broker's dead-lettering history; x-amqp-1.0-*: RabbitMQ's AMQP 1.0 conversion
//     headers); and a message whose encoded properties and headers make a content header frame larger
//     than frame_max (RabbitMQ would close the connection with 501). The frame size is computed exactly as
//     amqp091 encodes it, and every header value is one of string, int64, int32, int16, float64, bool or
//     []byte (a byte array).
//   - A mapped event routed to an exchange of its own (amqp.topic.target=exchange) is published there only
//     after a passive declare, on a channel of its own, found that exchange (once per exchange and Router);
//     one that does not exist, or that the user may not use, is refused with ErrInvalidEvent naming the fix
//     (declare it), so that a missing exchange never closes a lane's channel; an exchange name that is
//     empty, over 255 bytes, not UTF-8 or holds control characters is refused by Check. The first finding
//     of each such exchange is logged at INFO once per Dialer, not again by the Routers it dials after a
//     restart (TestMappedExchangeLoggedOncePerDialer).
//   - A lane keeps at most Window events queued or written and unconfirmed, the Router at most MaxHeld
//     held, and at most MaxInflightBytes of unresolved messages (body and content header, held ones
//     included) across its lanes, except one event larger than that, which goes alone. Publish blocks
//     while the one it needs is full and returns
//     ctx.Err() without enqueueing when ctx ends first. A message's body is dropped as soon as it is
//     written; its bytes go back to the window when it is confirmed, or when the Router fails or is
//     closed, held events included (a failure or Close also ends every Publish and Drain that waits).
//   - done is called exactly once per event, from a route goroutine, only after the broker confirmed the
//     message positively and did not return it (basic.return, matched by message id within the lane).
//     A nack, a return, a channel or connection close, or a confirm that does not arrive within
//     ConfirmTimeout puts the Router into a failed state; after that, done is never called again for any
//     event. The caller then closes the Router and restarts its stream from its last acknowledged position,
//     which is how no event is lost and the order per aggregate holds (modulo duplicates).
//   - Metrics.Unconfirmed is the age of the oldest message written to a lane's channel and not yet resolved,
//     across the open Routers: events held behind their aggregate and events queued but not written never
//     count, so a hot aggregate draining under a working broker keeps it near zero while a broker that
//     confirms nothing makes it grow with the clock (TestUnconfirmedLeavesHeldEventsOut,
//     TestUnconfirmedAgesWhileConfirmsAreWithheld). A Router logs a WARN once each time that wait passes
//     UnconfirmedBound. Each lane keeps it in one atomic that its confirmLoop sets: no lock, no allocation.
//   - A close by the broker or a lost connection is a *ClosedError (matching ErrBrokerClosed) whose
//     PerMessage says whether a single message can have caused it (406, 501, 502, 505, 540, and on a
//     lane's channel a 403 or a 404 naming an exchange other than Config.Exchange: a write refused, which
//     names the permission to grant, an internal exchange such as amq.rabbitmq.trace, an exchange deleted
//     after its passive check), and a 403 of a topic permission refusing one routing key on any exchange,
//     so that the caller can find that message by republishing one event at a time; a confirm timeout, a lost connection, an operator's or a node's close (320) and a 403 or 404 on
//     Config.Exchange never are. A close that names the exchange is attributed (Attributed, EventID) to
//     the lane's oldest unresolved publishing to that exchange: RabbitMQ handles a channel's publishes in
//     order and closes it at the first it refuses, and the publishings before it only lost their confirms
//     (TestInternalExchangeIsThatEventsRefusal, TestWriteRevokedAfterTheCheckIsThatEventsRefusal,
//     TestExchangeDeletedAfterTheCheckIsThatEventsRefusal). Its BrokerState is true for the write and
//     topic refusals and the 404 (a permission may be granted, an exchange declared): the caller retries
//     those for its refusal period.
//   - A nack, and a return from an exchange of amqp.topic.target=exchange, is a *PublishError naming its
//     event whose PerMessage is true and whose BrokerState is true: the broker's state (a queue that
//     drains, a binding that appears) may end it, so the caller retries it for a period before it blames
//     the event (cdc.Refusals). A return from Config.Exchange under NoAlternateExchange is not per message.
//
// Metrics (Config.Metrics, one per process, shared by the Routers dialled with it) counts nacks and returns,
// observes the confirm round trip, and reads the open Routers' in-flight events and bytes, the age of their
// oldest unconfirmed write (Metrics.Unconfirmed) and their connection.blocked state at scrape time.
//
// What RabbitMQ says before the first publish (the addresses of Config.URL, a connection that failed, a
// declaration it refused) route/rabbitmq turns into one sentence naming the fix; route owns the connection.
//
// What it never does: retry or republish (the caller restarts), reconnect on its own (amqp091's
// Config.Recovery stays nil: its recovery restarts delivery tags and nacks the window silently), log a
// payload or a password, or let an amqp091 type appear in its API.
package route
