package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

// Two consumers share one queue that holds every event of ten aggregates, shuffled, with a third of
// them published twice. Every event must be applied exactly once and each projection must end at the
// source's amount, whatever the interleaving.
func TestTwoConsumersApplyEachEventOnce(t *testing.T) {
	l := newLab(t)
	const aggregates, versions = 10, 10
	var events []inbox.Event
	wantAmount := map[string]int64{}
	for a := range aggregates {
		id := fmt.Sprintf("order-%d", a)
		for v := int64(1); v <= versions; v++ {
			delta := int64(a*100) + v
			events = append(events, order(id, v, delta))
			wantAmount[id] += delta
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	msgs := append([]inbox.Event(nil), events...)
	for i, ev := range events {
		if i%3 == 0 {
			msgs = append(msgs, ev)
		}
	}
	rng.Shuffle(len(msgs), func(i, j int) { msgs[i], msgs[j] = msgs[j], msgs[i] })
	for _, ev := range msgs {
		l.Publish(ev)
	}

	ctx, cancel := context.WithCancel(l.Ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for range 2 {
		p := l.ProcessorOn(l.Connect(), inbox.Config{Prefetch: 8, RetryMin: 10 * time.Millisecond, RetryMax: 100 * time.Millisecond})
		ch := l.Channel()
		wg.Go(func() { errs <- runner.Consume(ctx, p, ch, l.Queue) })
	}
	deadline := time.Now().Add(30 * time.Second)
	for l.Count(`SELECT count(*) FROM inbox.aggregate WHERE applied_version = $1`, versions) < aggregates ||
		l.Ready() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not every aggregate reached version %d within 30s", versions)
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("consumer: %v", err)
		}
	}

	applied := l.Count(`SELECT count(*) FROM applied_log`)
	distinct := l.Count(`SELECT count(DISTINCT event_id) FROM applied_log`)
	want(t, "applications", applied, int64(len(events)))
	want(t, "distinct events applied", distinct, int64(len(events)))
	for id, amount := range wantAmount {
		want(t, "amount of "+id, l.Amount(id), amount)
	}
	want(t, "inbox rows", l.Count(`SELECT count(*) FROM inbox.inbox WHERE status = 'applied'`), int64(len(events)))
	want(t, "parked left", l.Count(`SELECT count(*) FROM inbox.parked`), 0)
	want(t, "failed", l.Count(`SELECT count(*) FROM inbox.failed`), 0)
	summary(t, "consumers=2 events=%d published=%d applied=%d distinct=%d inbox=%d aggregates=%d at version %d",
		len(events), len(msgs), applied, distinct, l.Count(`SELECT count(*) FROM inbox.inbox`), aggregates, versions)
}
