package route

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// BenchmarkTrickle publishes events one at a time at a steady rate, as the stream hands them over at
// 1,000 and 5,000 events/s of 1-row transactions, to a queue of the shared RabbitMQ, and reports the
// process's CPU per event (route and amqp091: the broker and PostgreSQL are not in it) and the time from
// Publish to done. Run it with a fixed count, e.g. -benchtime 20000x: the rate, not b.N, sets its length.
func BenchmarkTrickle(b *testing.B) {
	for _, rate := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("%d/s", rate), func(b *testing.B) {
			br := newBroker(b)
			r := br.dial(br.config(""))
			br.queue("#", nil)
			evs := make([]cdc.Event, b.N)
			for i := range evs {
				evs[i] = event("trickle", fmt.Sprint(i), i)
			}
			took := make([]time.Duration, b.N)
			every := time.Second / time.Duration(rate)
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			start := time.Now()
			for i := range evs {
				if wait := time.Until(start.Add(time.Duration(i) * every)); wait > 0 {
					time.Sleep(wait)
				}
				at := time.Now()
				if err := r.Publish(context.Background(), evs[i], func() { took[i] = time.Since(at) }); err != nil {
					b.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := r.Drain(ctx); err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			cpu := cpuTime() - cpu0
			slices.Sort(took)
			b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/event")
			b.ReportMetric(float64(took[b.N/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[b.N*99/100].Microseconds())/1000, "p99-ms")
		})
	}
}

// cpuTime is the process's user and system CPU so far.
func cpuTime() time.Duration {
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		return 0
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
