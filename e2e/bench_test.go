package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// counter counts deliveries on a queue and records each one's latency from the insert's clock.
type counter struct {
	n         atomic.Int64
	latencies []time.Duration
}

func (e *env) count(queue string, expect int) *counter {
	ch := e.channel()
	ch.Qos(2000, 0, false)
	msgs, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		e.t.Fatal(err)
	}
	c := &counter{latencies: make([]time.Duration, 0, expect)}
	go func() {
		for m := range msgs {
			if ns, ok := m.Headers["sent_ns"].(int64); ok {
				c.latencies = append(c.latencies, time.Duration(time.Now().UnixNano()-ns))
			}
			c.n.Add(1)
		}
	}()
	return c
}

func (c *counter) wait(t testing.TB, n int64, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	for c.n.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d events arrived within %v", c.n.Load(), n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

// BenchmarkEndToEnd writes CDC_ROUTER_BENCH_EVENTS events (default 50,000) in transactions of 500 rows as
// fast as PostgreSQL takes them, and reports events/s from the first insert to the last delivery, the
// latency from insert to delivery (p50/p95/p99, which under this saturating load is mostly queueing) and
// the router's peak RSS. Run: make bench-e2e.
func BenchmarkEndToEnd(b *testing.B) {
	benchStream(b, envInt("CDC_ROUTER_BENCH_EVENTS", 50_000), 500, 0)
}

// BenchmarkLatency writes 1,000 events/s (transactions of 10 rows every 10 ms) for 15 s and reports the
// latency from insert to delivery when the router keeps up.
func BenchmarkLatency(b *testing.B) {
	benchStream(b, 15_000, 10, 10*time.Millisecond)
}

func benchStream(b *testing.B, events, batch int, pause time.Duration) {
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newStreamEnv(b)
		c := e.count(e.queue, events)
		r := e.start("", "--log-level", "info")
		r.waitLog("msg=streaming ", 30*time.Second)
		b.StartTimer()
		began := time.Now()
		ctx := context.Background()
		next := time.Now()
		for written := 0; written < events; written += batch {
			_, err := e.db.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
				SELECT gen_random_uuid(), 'order', 'agg-' || ($1 + g), $2, 'created',
				       jsonb_build_object('n', g, 'customer', 'someone', 'amount', 12.5),
				       jsonb_build_object('sent_ns', (extract(epoch from clock_timestamp()) * 1e9)::bigint)
				FROM generate_series(0, $3 - 1) g`, (written/batch%(1000/batch+1))*batch, written/1000+1, batch)
			if err != nil {
				b.Fatal(err)
			}
			if pause > 0 {
				next = next.Add(pause)
				time.Sleep(time.Until(next))
			}
		}
		c.wait(b, int64(events), 10*time.Minute)
		took := time.Since(began)
		b.StopTimer()
		lat := append([]time.Duration(nil), c.latencies...)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		rss := testenv.PeakRSS(r.Cmd.Process.Pid)
		cpu := testenv.CPUSeconds(r.Cmd.Process.Pid)
		b.ReportMetric(cpu*1e6/float64(events), "router-cpu-us/event")
		b.ReportMetric(float64(events)/took.Seconds(), "events/s")
		b.ReportMetric(float64(percentile(lat, 0.50).Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(percentile(lat, 0.95).Microseconds())/1000, "p95-ms")
		b.ReportMetric(float64(percentile(lat, 0.99).Microseconds())/1000, "p99-ms")
		b.ReportMetric(rss, "peak-RSS-MiB")
		fmt.Printf("%s: %d events in %v = %.0f events/s; latency p50 %v p95 %v p99 %v; router peak RSS %.1f MiB\n",
			b.Name(), events, took.Round(time.Millisecond), float64(events)/took.Seconds(), percentile(lat, 0.5).Round(time.Microsecond),
			percentile(lat, 0.95).Round(time.Microsecond), percentile(lat, 0.99).Round(time.Microsecond), rss)
	}
}

// BenchmarkSnapshot snapshots CDC_ROUTER_BENCH_ROWS rows (default 1,000,000) already in the table and
// reports rows/s and the router's peak RSS. Run: make bench-e2e.
func BenchmarkSnapshot(b *testing.B) {
	rows := envInt("CDC_ROUTER_BENCH_ROWS", 1_000_000)
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		e := newStreamEnv(b)
		ctx := context.Background()
		for done := 0; done < rows; done += 100_000 {
			_, err := e.db.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
				SELECT gen_random_uuid(), 'order', 'agg-' || (g % 1000), $1 + g / 1000, 'created',
				       jsonb_build_object('n', g, 'customer', 'someone', 'amount', 12.5)
				FROM generate_series(0, $2 - 1) g`, done/1000+1, min(100_000, rows-done))
			if err != nil {
				b.Fatal(err)
			}
		}
		e.exec("VACUUM ANALYZE outbox")
		c := e.count(e.queue, 0)
		b.StartTimer()
		began := time.Now()
		r := e.start("", "--log-level", "info")
		r.waitLog("msg=streaming ", 30*time.Minute)
		took := time.Since(began)
		c.wait(b, int64(rows), 10*time.Minute)
		b.StopTimer()
		rss := testenv.PeakRSS(r.Cmd.Process.Pid)
		b.ReportMetric(float64(rows)/took.Seconds(), "rows/s")
		b.ReportMetric(rss, "peak-RSS-MiB")
		fmt.Printf("snapshot: %d rows confirmed in %v = %.0f rows/s; router peak RSS %.1f MiB\n", rows,
			took.Round(time.Millisecond), float64(rows)/took.Seconds(), rss)
	}
}
