package inbox_test

import (
	"fmt"
	"testing"

	"github.com/cdc-router/cdc-router/inbox"
)

// Scenario 6: the broker's duplicate windows. The same event is published twice, both confirmed (the
// publisher's confirm was lost before it marked the outbox row). The first delivery commits its business
// transaction and is then NACKed with requeue before its ACK (the consumer's ACK was lost). Three
// deliveries reach the consumer; exactly one changes the projection.
func TestBrokerDuplicateWindow(t *testing.T) {
	l := newLab(t)
	p := l.Processor(inbox.Config{})
	e1 := order("42", 1, 10)
	published := 0
	for range 2 {
		l.Publish(e1)
		published++
	}
	ch := l.Channel()
	deliveries, applied, redelivered := 0, 0, 0
	var outcomes []inbox.Outcome
	for i := range 3 {
		d := l.Get(ch)
		deliveries++
		if d.Redelivered {
			redelivered++
		}
		res := l.Process(p, d)
		outcomes = append(outcomes, res.Outcome)
		if res.Outcome == inbox.Applied {
			applied++
		}
		if i == 0 {
			// Committed, not yet acknowledged: hand it back to the broker instead.
			if err := d.Nack(false, true); err != nil {
				t.Fatal(err)
			}
			continue
		}
		d.Ack(false)
	}
	inboxRows, amount := l.Count(`SELECT count(*) FROM inbox.inbox`), l.Amount("42")
	want(t, "outcomes", len(outcomes), 3)
	want(t, "first", outcomes[0], inbox.Applied)
	want(t, "second", outcomes[1], inbox.Duplicate)
	want(t, "third", outcomes[2], inbox.Duplicate)
	want(t, "redelivered", redelivered, 1)
	want(t, "queue", l.Ready(), 0)
	want(t, "applied_log", l.Count(`SELECT count(*) FROM applied_log`), 1)
	line := fmt.Sprintf("published=%d deliveries=%d applied=%d inbox=%d amount=%d",
		published, deliveries, applied, inboxRows, amount)
	want(t, "summary", line, "published=2 deliveries=3 applied=1 inbox=1 amount=10")
	summary(t, "%s", line)
}
