package route

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// BenchmarkWindow publishes b.N events of 1,000 aggregates through a Router as fast as it confirms them,
// with the adaptive limit and with fixed windows, to a classic queue that a consumer drains and to a
// quorum queue that nobody consumes; it reports events/s and the lanes' summed limit at the end
// (docs/benchmarks.md has the end-to-end figures: make bench-compare).
func BenchmarkWindow(b *testing.B) {
	for _, queue := range []string{"classic", "quorum"} {
		for _, w := range []struct {
			name   string
			window int
			fixed  bool
		}{{"adaptive", 512, false}, {"fixed-32", 32, true}, {"fixed-512", 512, true}} {
			b.Run(queue+"/"+w.name, func(b *testing.B) {
				br := newBroker(b)
				q := fmt.Sprintf("%s-q", br.exchange)
				args := amqp.Table{"x-queue-type": queue}
				if _, err := br.admin.QueueDeclare(q, true, false, false, false, args); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { _, _ = br.admin.QueueDelete(q, false, false, false) })
				cfg := br.config("")
				cfg.Window, cfg.AdaptiveWindow = w.window, !w.fixed
				r := br.dial(cfg)
				if err := br.admin.QueueBind(q, "#", br.exchange, false, nil); err != nil {
					b.Fatal(err)
				}
				if queue == "classic" {
					ds, err := br.admin.Consume(q, "", true, false, false, false, nil)
					if err != nil {
						b.Fatal(err)
					}
					go func() {
						for range ds {
						}
					}()
				}
				var done atomic.Int64
				ctx := context.Background()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := r.Publish(ctx, event("bench", fmt.Sprint(i%1000), i), func() { done.Add(1) }); err != nil {
						b.Fatal(err)
					}
				}
				for done.Load() < int64(b.N) {
					if err := r.Err(); err != nil {
						b.Fatal(err)
					}
					time.Sleep(time.Millisecond)
				}
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "events/s")
				b.ReportMetric(float64(r.WindowLimit()), "limit")
			})
		}
	}
}

// TestAdaptiveWindowDeliversEverything: with the adaptive limit, 3,000 events of 50 aggregates over two
// lanes are each confirmed once and reach the queue in each aggregate's order, and the lanes' limits end
// within [floor, Window] (a lane never holds more than Window unconfirmed: the budget's peak).
func TestAdaptiveWindowDeliversEverything(t *testing.T) {
	b := newBroker(t)
	cfg := b.config("")
	cfg.Lanes, cfg.Window, cfg.AdaptiveWindow = 2, 64, true
	r := b.dial(cfg)
	q := b.queue("#", nil)
	c := newCounter()
	const n = 3000
	for i := 0; i < n; i++ {
		publishAll(t, r, c, event("adaptive", fmt.Sprint(i%50), i/50+1))
	}
	got := b.consume(q, n, 60*time.Second)
	last := map[string]int64{}
	for _, d := range got {
		agg, v := d.Headers["aggregate_id"], d.Headers["aggregate_version"]
		key := fmt.Sprint(agg)
		ver, _ := v.(int64)
		if ver <= last[key] {
			t.Fatalf("aggregate %s: version %d after %d", key, ver, last[key])
		}
		last[key] = ver
	}
	for deadline := time.Now().Add(10 * time.Second); c.t.Load() < n && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if c.t.Load() != n {
		t.Fatalf("%d of %d confirmed", c.t.Load(), n)
	}
	if limit := r.WindowLimit(); limit < 2*vegasFloor || limit > 2*64 {
		t.Errorf("summed limit %d, want within [%d, %d]", limit, 2*vegasFloor, 2*64)
	}
	for _, l := range r.lanes {
		if _, peak := l.window.units.usage(); peak > 64 {
			t.Errorf("lane %d had %d unconfirmed, more than the window 64", l.id, peak)
		}
	}
	t.Logf("summed limit at the end: %d", r.WindowLimit())
}
