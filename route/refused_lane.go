package route

import "time"

// attributeWait bounds how long refusedPublish waits for the publishing the broker refused to reach
// sent: amqp091's reader can report the close before the lane's writer, which wrote it, hands it over.
const attributeWait = 250 * time.Millisecond

// refusedPublish returns the publishing whose publish made RabbitMQ close the lane's channel with a reply
// naming exchange x (and routing key key, unless ""): the oldest unresolved publishing of the lane to x
// (with key), oldest or one still in sent, since
// RabbitMQ handles a channel's publishes in write order and closes the channel at the first it refuses.
// The publishings before it lost their confirms with the channel, not to a refusal: the caller publishes
// them again. It returns nil when none is found within attributeWait. Called by confirmLoop, the reader of
// sent, once the channel is closed; the publishings it takes from sent go back to the budget.
func (l *lane) refusedPublish(x, key string, oldest *publishing) *publishing {
	refused := func(p *publishing) bool { return p.exchange == x && (key == "" || p.key == key) }
	if oldest != nil && refused(oldest) {
		return oldest
	}
	wait := time.NewTimer(attributeWait)
	defer wait.Stop()
	for {
		select {
		case p := <-l.sent:
			l.r.bytes.release(p.size)
			p.size = 0
			if refused(p) {
				return p
			}
		case <-wait.C:
			return nil
		}
	}
}

// remember records that the broker refused an event of aggregate agg, so that the Routers the Dialer dials
// next give agg one unconfirmed event until one of its events is confirmed (refusals). It matters only with
// an AggregateWindow over 1.
func (l *lane) remember(agg uint64) {
	if l.r.cfg.AggregateWindow > 1 {
		l.r.refused.add(agg)
	}
}
