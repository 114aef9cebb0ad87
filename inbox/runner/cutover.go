package runner

import (
	"context"
	"fmt"
	"log/slog"
)

// Cutover is the first step of changing a partitioned group's partition count (docs/consumer-groups.md):
// it declares the group of next (its exchange, bound to the router's exchange, and its partition queues,
// which from then on receive every event the group wants) without consuming, and unbinds the group of
// prev from the router's exchange, so that its partitions receive nothing more. Either may have
// Partitions 0: the plain queue Queue (from one queue to a group, or back). The instances of prev go
// on consuming what their partitions hold; once those are empty, stop them, and only then start the
// instances of next: an aggregate's events in next's partitions that prev already applied are duplicates,
// and none is applied before an earlier version. prev and next must name the same Queue, Exchange and
// Bindings, and differ in Partitions. Cutover is idempotent; an instance of prev that reconnects binds prev
// again (its partitions then get copies of new events too, which the order of the steps makes harmless).
func Cutover(ctx context.Context, prev, next Config, log *slog.Logger) error {
	prev, next = prev.Defaults(), next.Defaults()
	switch {
	case prev.Partitions == next.Partitions:
		return fmt.Errorf("inbox runner cutover: both configurations have %d partitions; nothing to cut over", prev.Partitions)
	case prev.Queue != next.Queue || prev.Exchange != next.Exchange:
		return fmt.Errorf("inbox runner cutover: the groups differ in Queue or Exchange (%q on %q, %q on %q); a cutover keeps them",
			prev.Queue, prev.Exchange, next.Queue, next.Exchange)
	}
	if err := next.Validate(); err != nil {
		return err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Runner{cfg: next, log: log}
	s, err := r.connect(ctx) // declares next's exchange, binding and partitions
	if err != nil {
		return err
	}
	defer s.close(log)
	from, to := prev.Queue, next.Queue
	if prev.Partitions > 0 {
		from = prev.partitionExchange()
	}
	if next.Partitions > 0 {
		to = next.partitionExchange()
	}
	for _, key := range prev.Bindings {
		var err error
		if prev.Partitions > 0 {
			err = s.ch.ExchangeUnbind(from, key, prev.Exchange, false, nil)
		} else {
			err = s.ch.QueueUnbind(from, key, prev.Exchange, nil)
		}
		if err != nil {
			return brokerError(fmt.Sprintf("unbind %s from %s with %q", from, prev.Exchange, key), err)
		}
	}
	log.Info("inbox runner cutover: the new queues receive the group's events, the old ones no more", "from", from, "to", to)
	return nil
}
