// Package message maps an outbox event (cdc.Event) to the AMQP message the router publishes, and decides
// which events RabbitMQ would refuse deterministically, without a connection except for its frame_max.
//
// What it owns: the routing key ("<aggregate_type>.<event_type>"), the message's properties and the
// router's headers (the Header* names), the conversion of a native headers column and of a mapped
// event's columns, and the exact size of the content header frame amqp091 writes.
//
// What it guarantees, each pinned by a test:
//   - Build and Unchecked give the same message for the same event (TestMessageGolden,
//     TestMessageBodyUnchanged; the route package rebuilds a held event's message from its event and
//     relies on it), and the body is the payload column, byte for byte.
//   - Check refuses, with an error wrapping ErrInvalidEvent (cdc.ErrUnpublishable) that names the reason,
//     every event whose message RabbitMQ would refuse for reasons of the message alone: short strings over
//     255 bytes, an empty id, a headers column that is not a JSON object, the header names RabbitMQ
//     reserves (TestCheck, TestCheckMapped; against the broker in route's TestCheckReservedAndShortStrings).
//   - Every message, native and mapped, carries its aggregate's bucket (HeaderAggregateBucket, Bucket: a
//     documented hash of aggregate_type and aggregate_id, 0 to 63), which a partitioned consumer group
//     (inbox/runner, Config.Partitions) routes on; its values are pinned (TestBucketIsTheDocumentedFunction,
//     TestBucketSpreadsAggregates, TestMessagesCarryTheBucket).
//   - ContentHeaderSize is exactly the payload amqp091 v1.16 writes for the content header frame, for
//     every value type the mapping produces (route's TestContentHeaderSizeIsWhatAmqp and
//     TestRandomHeadersBrokerAcceptsOrMappingRefuses, against RabbitMQ), so CheckFrameFix refuses a
//     message over frame_max before the broker closes the connection with 501.
//
// What it never does: talk to the broker, log, or keep state.
package message

import "github.com/cdc-router/cdc-router/internal/cdc"

// ErrInvalidEvent is wrapped by every refusal of Check, Build and CheckFrameFix; it is
// cdc.ErrUnpublishable, so callers quarantine the event.
var ErrInvalidEvent = cdc.ErrUnpublishable
