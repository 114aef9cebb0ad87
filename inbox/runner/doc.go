// Package runner reads cdc-router's events from RabbitMQ and hands each to an inbox.Processor,
// acknowledging a delivery only after the Processor's transaction committed. It is the broker side of
// the consumer half; package inbox, which it imports, holds the transaction and imports no broker client.
//
// It owns the AMQP side a consumer would otherwise write by hand: the message format (DecodeDelivery:
// message_id, type, body and the aggregate headers to an inbox.Event), a one-channel loop (Consume), and
// the Runner (New, Config): connecting and reconnecting, waiting for the router's exchange, declaring and
// binding the queue, dispatching per aggregate over workers, retrying and requeueing with backoff,
// draining on a stop, its metrics (the cdc_router_inbox_* series), and carrying out the repair
// requests filed with inbox.Admin (Processor.ServeRequest, every Config.RequestPoll), except those cancelled or
// expired; a resolve whose premise no longer holds is refused and the refusal recorded.
//
// It guarantees, each pinned by a test:
//   - a delivery is acknowledged only after Process returned an outcome whose Ack is true, so after its
//     transaction committed, and requeued otherwise; a malformed one is recorded as failed and acked
//     (TestConsumeRetriesTransientAndRecordsPermanent, TestRunnerReconnectLosesNothingAndAppliesNothingTwice);
//   - the events of one aggregate are processed one at a time in delivery order while other aggregates
//     go on, and a retried delivery holds only its own aggregate (TestRunnerOrderAndThroughput,
//     TestRunnerRetryDoesNotHoldOtherAggregates, TestRunnerRequeuesGapWithoutSleepingOnTheChannel);
//   - a connection or channel loss is retried with capped, jittered backoff and loses nothing
//     (TestRunnerReconnectLosesNothingAndAppliesNothingTwice, TestRunnerRedeclaresADeletedQueue);
//   - a database that does not answer yet is waited for (inbox.Config.Prepare, then the schema check),
//     not refused (TestRunnerWaitsForPostgresAtStart); the exchange is waited for, never declared
//     (TestRunnerWaitsForTheRoutersExchange);
//   - the queue is declared with exactly Config's arguments, and a queue that exists with others is
//     refused naming the argument and the fix (TestRunnerNamesTheMismatchedQueueArgument,
//     TestRunnerRefusesAQueueOfAnotherType);
//   - with Config.Partitions N, the runner is one instance of a partitioned consumer group: it declares a
//     headers exchange bound to the router's, N single-active-consumer partition queues bound to it by the
//     aggregate_bucket header cdc-router sets (route/message.Bucket), and member slots; the instances share
//     the partitions evenly, hand a partition over only after the handlers of its deliveries settled (the
//     rest return to the queue in order when its channel closes), and take over a stopped or dead
//     instance's partitions within about RebalanceInterval; an event without the header is kept in the
//     group's unrouted queue and reported, never dropped; objects that exist with other arguments are
//     refused naming the fix; Cutover changes N in order (TestGroupSharesPartitionsAndHandsThemOver,
//     TestGroupRefusesObjectsThatDiffer, TestGroupKeepsEventsWithoutABucket, TestGroupCutoverKeepsOrder,
//     TestGroupCutoverFromAPlainQueueAndBack, TestPartitionBucketsAndAssignment, and e2e's
//     TestShortConsumerGroupUnderFaults and TestConsumerGroupUnderFaults, tag consumergroups);
//   - a graceful stop lets the handlers in flight finish until Config.DrainTimeout and requeues every
//     delivery it did not process (TestRunnerStopLetsTheHandlerInFlightFinish,
//     TestRunnerDrainTimeoutCancelsTheHandler, TestConsumeStopsCleanlyOnCancel).
//
// It never acknowledges before commit, never declares the router's exchange, never logs a payload or a
// password (URLs are redacted), and never touches the inbox tables but through the Processor.
package runner
