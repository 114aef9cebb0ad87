package runner_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

// metric is the value of the counter, gauge or histogram (its count) name whose labels include the
// given name/value pairs; 0 when there is none.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				return float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return 0
}

// A known sequence of outcomes (applied, duplicate, parked, applied closing the gap, stale, conflict,
// malformed, a parked event whose gap stays open, a handler error then applied) gives the same counts
// in cdc_router_inbox_events_total and in the OnOutcome hook, and the gauges read the tables.
func TestRunnerMetricsAfterKnownOutcomes(t *testing.T) {
	l := newRunnerLab(t)
	v1, v2, v3, v4 := order("m", 1, 1), order("m", 2, 2), order("m", 3, 3), order("m", 4, 4)
	stale := order("m", 1, 1) // a new id at an applied version
	conflict := v1
	conflict.Payload = []byte(`{"delta": 99}`)
	ahead := order("b", 2, 2)
	failOnce := true
	l.wrap = func(ctx context.Context, tx pgx.Tx, ev inbox.Event, next inbox.Handler) error {
		if ev.ID == v4.ID && failOnce {
			failOnce = false // one worker: no race
			return errors.New("flaky")
		}
		return next(ctx, tx, ev)
	}
	l.publishAll([]inbox.Event{v1, v1, v3, v2, stale, conflict})
	ctx, cancel := context.WithTimeout(l.Ctx, 10*time.Second)
	defer cancel()
	dc, err := l.Pub.PublishWithDeferredConfirmWithContext(ctx, l.Exchange, "order.OrderAmountAdded", true, false,
		amqp.Publishing{MessageId: newID(), Body: []byte(`{}`)}) // no aggregate headers: malformed
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := dc.WaitContext(ctx); !ok || err != nil {
		t.Fatalf("confirm: %v %v", ok, err)
	}
	l.publishAll([]inbox.Event{ahead, v4})

	var mu sync.Mutex
	hooked := map[string]int{}
	cfg := l.config(1)
	cfg.OnOutcome = func(ev inbox.Event, res inbox.Result, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			hooked["error"]++
			return
		}
		hooked[res.Outcome.String()]++
	}
	stop := l.start(l.processor(inbox.Config{}), cfg)
	l.waitFor("ten outcomes", 30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		n := 0
		for _, c := range hooked {
			n += c
		}
		return n == 10
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	time.Sleep(10 * time.Millisecond) // the parked event ages

	wantOutcomes := map[string]int{"applied": 3, "duplicate": 1, "parked": 2, "stale": 1, "conflict": 1,
		"failed": 1, "gap": 0, "error": 1}
	for outcome, n := range wantOutcomes {
		want(t, "cdc_router_inbox_events_total "+outcome, metric(t, l.reg, "cdc_router_inbox_events_total", "outcome", outcome,
			"consumer", l.consumer), float64(n))
		want(t, "OnOutcome "+outcome, hooked[outcome], n)
	}
	want(t, "cdc_router_inbox_handler_retries_total", metric(t, l.reg, "cdc_router_inbox_handler_retries_total"), 1)
	want(t, "cdc_router_inbox_redeliveries_total", metric(t, l.reg, "cdc_router_inbox_redeliveries_total"), 0)
	want(t, "cdc_router_inbox_apply_latency_seconds count", metric(t, l.reg, "cdc_router_inbox_apply_latency_seconds"), 3)
	want(t, "cdc_router_inbox_parked_events", metric(t, l.reg, "cdc_router_inbox_parked_events", "consumer", l.consumer), 1)
	want(t, "cdc_router_inbox_failed_events", metric(t, l.reg, "cdc_router_inbox_failed_events"), 2)
	if age := metric(t, l.reg, "cdc_router_inbox_oldest_parked_age_seconds"); age <= 0 || age > 60 {
		t.Errorf("cdc_router_inbox_oldest_parked_age_seconds = %v, want a few milliseconds", age)
	}
	if err := testutil.GatherAndCompare(l.reg, strings.NewReader(`
# HELP cdc_router_inbox_handler_retries_total Retries scheduled after Process returned an error.
# TYPE cdc_router_inbox_handler_retries_total counter
cdc_router_inbox_handler_retries_total{consumer="`+l.consumer+`"} 1
`), "cdc_router_inbox_handler_retries_total"); err != nil {
		t.Error(err)
	}
	summary(t, "outcomes %v; parked gauge %v, failed gauge %v", hooked,
		metric(t, l.reg, "cdc_router_inbox_parked_events"), metric(t, l.reg, "cdc_router_inbox_failed_events"))
}

// Two runners of different consumers share one registry; a second runner of the same consumer on it is
// refused, naming the cause.
func TestRunnerMetricsPerConsumer(t *testing.T) {
	l := newRunnerLab(t)
	if _, err := runner.New(l.processor(inbox.Config{}), l.config(1), nil); err != nil {
		t.Fatal(err)
	}
	other := *l
	other.consumer = l.consumer + "-2"
	if _, err := runner.New(other.processor(inbox.Config{}), l.config(1), nil); err != nil {
		t.Errorf("a second consumer on the same registry: %v", err)
	}
	_, err := runner.New(l.processor(inbox.Config{}), l.config(1), nil)
	if err == nil || !strings.Contains(err.Error(), "one Runner per consumer and registry") {
		t.Errorf("a second runner of the same consumer on one registry: err = %v", err)
	}
}
