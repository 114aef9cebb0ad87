package e2e

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// postgresCPU is the user+system CPU time, in seconds, of the test cluster's postmaster and its children
// (the walsenders decoding the WAL, and the backends) found through the parent of this connection's backend.
func (e *env) postgresCPU() float64 {
	e.t.Helper()
	var backend int
	if err := e.db.QueryRow(context.Background(), `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		e.t.Fatal(err)
	}
	return testenv.ClusterCPU(testenv.ParentPID(backend))
}

// BenchmarkShards measures N = 1, 2 and 4 routers draining CDC_ROUTER_BENCH_EVENTS events (default
// 60,000, 1,000 aggregates, transactions of 500 rows) that were written while they were stopped: events/s
// from the routers' start to the last delivery, PostgreSQL's CPU per event (every slot decodes all of the
// WAL, so it grows with N) and the routers' CPU per event. Run: make bench-shards.
func BenchmarkShards(b *testing.B) {
	events := envInt("CDC_ROUTER_BENCH_EVENTS", 60_000)
	for _, n := range []int{1, 2, 4} {
		b.Run(fmt.Sprintf("N=%d", n), func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				benchShards(b, n, events)
			}
		})
	}
}

func benchShards(b *testing.B, n, events int) {
	e := newStreamEnv(b)
	if n > 1 {
		e.migrateShards(n)
	}
	flags := func(i int) []string {
		if n == 1 {
			return []string{"--log-level", "info"}
		}
		return []string{"--log-level", "info", "--shard", fmt.Sprintf("%d/%d", i, n)}
	}
	start := func() []*router {
		rs := make([]*router, n)
		for i := range n {
			rs[i] = e.start("", flags(i)...)
		}
		return rs
	}
	// A first start creates the slots; the events are then written while no router runs.
	for _, r := range start() {
		r.waitLog("msg=streaming ", 60*time.Second)
		r.signal(syscall.SIGTERM)
		r.wait(30 * time.Second)
	}
	ctx := context.Background()
	for written := 0; written < events; written += 500 {
		_, err := e.db.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			SELECT gen_random_uuid(), 'order', 'agg-' || (g % 1000), $1 + g / 1000, 'created',
			       jsonb_build_object('n', g, 'customer', 'someone', 'amount', 12.5)
			FROM generate_series(0, 499) g`, written)
		if err != nil {
			b.Fatal(err)
		}
	}
	c := e.count(e.queue, events)
	pgBefore := e.postgresCPU()
	b.StartTimer()
	began := time.Now()
	rs := start()
	c.wait(b, int64(events), 10*time.Minute)
	took := time.Since(began)
	b.StopTimer()
	pgCPU := e.postgresCPU() - pgBefore
	var routerCPU, rss float64
	for _, r := range rs {
		routerCPU += testenv.CPUSeconds(r.Cmd.Process.Pid)
		rss = max(rss, testenv.PeakRSS(r.Cmd.Process.Pid))
	}
	b.ReportMetric(float64(events)/took.Seconds(), "events/s")
	b.ReportMetric(pgCPU*1e6/float64(events), "pg-cpu-us/event")
	b.ReportMetric(routerCPU*1e6/float64(events), "routers-cpu-us/event")
	b.ReportMetric(rss, "peak-RSS-MiB")
	fmt.Printf("%s: %d events in %v = %.0f events/s; PostgreSQL CPU %.2f s (%.1f us/event); routers' CPU %.2f s; peak RSS %.1f MiB\n",
		b.Name(), events, took.Round(time.Millisecond), float64(events)/took.Seconds(), pgCPU, pgCPU*1e6/float64(events),
		routerCPU, rss)
}
