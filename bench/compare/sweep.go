package main

// Issue 37's modes, where a small in-flight window costs rate: each runs the bare publisher (the ceiling
// of that mode), cdc-router with each fixed window of -sweep-windows, and cdc-router with its defaults
// (the adaptive in-flight limit, with --window as its ceiling, once the binary has --adaptive-window),
// over the same backlog drain, so that the default can be compared with the best fixed window of the same
// run (issue 37's target: at least 0.95 of it).
//
//   - quorum: the queue is a quorum queue and nobody consumes it. A quorum queue confirms a message once
//     its log entry is committed, so a window of W messages caps the rate at W per confirm round trip. The
//     messages accumulate; the rate is read from the queue's depth (a passive queue.declare every 10 ms),
//     from the first count above zero to the count of all of them.
//   - far: the publishers (the bare publisher and the router; not the consumer, which measures) reach
//     RabbitMQ through a delaying TCP proxy (proxy.go) that adds -far-delay each way. The queue is the
//     drain's: classic, with a consumer that keeps up; the rate is the drain's, first delivery to last.
//     With -far-queue quorum it is the quorum mode's queue instead, behind the proxy.

import (
	"fmt"
	"math"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// sweepMode is one of the modes that compare fixed windows with the default.
type sweepMode struct {
	kind      string        // "quorum" or "far"
	queueType string        // x-queue-type of the queue; "": classic
	consumer  bool          // a consumer keeps up (the drain's rate); false: the queue's depth gives the rate
	delay     time.Duration // one way, through the delaying proxy; 0: none
}

func (m sweepMode) name() string {
	if m.kind == "far" {
		if m.queueType == "quorum" {
			return fmt.Sprintf("far broker, %v each way, quorum queue, no consumer", m.delay)
		}
		return fmt.Sprintf("far broker, %v each way", m.delay)
	}
	return "quorum queue, no consumer"
}

// slug names the mode's databases, slots and queues.
func (m sweepMode) slug() string {
	if m.kind == "far" {
		return "far"
	}
	return "qq"
}

// sweepModes are the modes -modes asks for, in the order they run.
func sweepModes(c config) []sweepMode {
	var ms []sweepMode
	if c.modes["quorum"] {
		ms = append(ms, sweepMode{kind: "quorum", queueType: "quorum"})
	}
	if c.modes["far"] {
		m := sweepMode{kind: "far", consumer: true, delay: c.farDelay}
		if c.farQuorum {
			m.queueType, m.consumer = "quorum", false
		}
		ms = append(ms, m)
	}
	return ms
}

const routerDefault = "cdc-router, default"

// fixedName is the row of the router with a fixed window of w per lane.
func fixedName(w int) string { return fmt.Sprintf("cdc-router, --window %d fixed", w) }

// sweepSystems are the rows of a sweep mode: the ceiling, each fixed window, the default.
func sweepSystems(windows []int) []string {
	out := []string{bare}
	for _, w := range windows {
		out = append(out, fixedName(w))
	}
	return append(out, routerDefault)
}

// windowArgs are the router's flags of a fixed window of w: with --adaptive-window=false when the binary
// has that flag (its default is then adaptive, with --window as the ceiling).
func windowArgs(w int, adaptiveFlag bool) []string {
	if adaptiveFlag {
		return []string{"--adaptive-window=false", "--window", strconv.Itoa(w)}
	}
	return []string{"--window", strconv.Itoa(w)}
}

// runSweepModes runs every sweep mode of one run.
func runSweepModes(c config, pg *testenv.Postgres, pm, run int, all map[string][]result) error {
	for _, m := range sweepModes(c) {
		if err := runSweep(c, pg, pm, run, m, all); err != nil {
			return err
		}
	}
	return nil
}

func runSweep(c config, pg *testenv.Postgres, pm, run int, m sweepMode, all map[string][]result) error {
	pubURL := ""
	if m.delay > 0 {
		target, err := brokerAddr(c.amqpURL)
		if err != nil {
			return fmt.Errorf("-amqp-url: %w", err)
		}
		proxy, err := newDelayProxy(target, m.delay)
		if err != nil {
			return fmt.Errorf("delaying proxy: %w", err)
		}
		defer proxy.close()
		if pubURL, err = proxy.url(c.amqpURL); err != nil {
			return err
		}
	}
	var ceiling float64
	for i, sys := range sweepSystems(c.sweepWindows) {
		j := job{mode: m.name(), sys: sys, kind: router, run: run, queueType: m.queueType, noConsumer: !m.consumer, pubURL: pubURL}
		switch {
		case sys == bare:
			j.kind, j.name = bare, fmt.Sprintf("bench_%s_bare_%d", m.slug(), run)
		case sys == routerDefault:
			j.name = fmt.Sprintf("bench_%s_default_%d", m.slug(), run)
			j.profDir = sweepProfileDir(c, m, "default", run)
		default:
			w := c.sweepWindows[i-1]
			j.name, j.routerArgs = fmt.Sprintf("bench_%s_w%d_%d", m.slug(), w, run), windowArgs(w, c.adaptiveFlag)
			j.profDir = sweepProfileDir(c, m, fmt.Sprintf("window-%d", w), run)
		}
		fmt.Fprintf(c.log, "run %d/%d: %s, %s ...", run, c.runs, m.name(), sys)
		r, err := runJob(c, pg, pm, j)
		if err != nil {
			fmt.Fprintln(c.log)
			return err
		}
		if sys == bare {
			ceiling = r.rate
		}
		limit := ""
		if l := medianLimit(r.limits); l >= 0 {
			limit = fmt.Sprintf(", median limit %.0f", l)
		}
		fmt.Fprintf(c.log, " %.0f events/s (%.2f of the bare publisher), CPU %.1f µs/event, peak RSS %.1f MiB%s\n",
			r.rate, r.rate/ceiling, r.cpuPerEvent, r.rss, limit)
		all[m.name()+"/"+sys] = append(all[m.name()+"/"+sys], r)
	}
	return nil
}

// sweepProfileDir is where the router of one row of a sweep mode writes its profiles (-pprof-dir, the
// first run only): <pprof-dir>/<quorum|far>-<default|window-N>.
func sweepProfileDir(c config, m sweepMode, row string, run int) string {
	if c.pprofDir == "" || run != 1 {
		return ""
	}
	return filepath.Join(c.pprofDir, m.kind+"-"+row)
}

// sweepRows writes the table rows of the sweep modes: / ceiling is each row's rate over the bare
// publisher's in the same mode and run.
func sweepRows(b *strings.Builder, c config, all map[string][]result) {
	for _, m := range sweepModes(c) {
		ceiling := all[m.name()+"/"+bare]
		for _, sys := range sweepSystems(c.sweepWindows) {
			writeRow(b, m.name(), sys, all[m.name()+"/"+sys], ceiling, "–", sys != bare)
		}
	}
}

// sweepSummary is the table of the sweep modes against issue 37's target: the default's rate over the
// best fixed window's (the fixed window with the highest median rate), medians of the runs, and per run
// (each run's default over the same window's rate in that run).
func sweepSummary(c config, all map[string][]result) string {
	ms := sweepModes(c)
	if len(ms) == 0 || len(c.sweepWindows) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteString("\n| mode | best fixed window | its events/s | default events/s | default / best fixed | per run | ≥ 0.95 |\n")
	b.WriteString("|---|---:|---:|---:|---:|---|---|\n")
	for _, m := range ms {
		def := all[m.name()+"/"+routerDefault]
		best, bestRate := 0, -1.0
		for _, w := range c.sweepWindows {
			if r := median(pick(all[m.name()+"/"+fixedName(w)], func(r result) float64 { return r.rate })); r > bestRate {
				best, bestRate = w, r
			}
		}
		fixed := all[m.name()+"/"+fixedName(best)]
		if len(def) == 0 || len(fixed) == 0 {
			continue
		}
		defRate := median(pick(def, func(r result) float64 { return r.rate }))
		ratio := defRate / bestRate
		var per []string
		for i := range def {
			if i < len(fixed) {
				per = append(per, fmt.Sprintf("%.2f", def[i].rate/fixed[i].rate))
			}
		}
		met := "no"
		if ratio >= 0.95 {
			met = "yes"
		}
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.2f | %s | %s |\n", m.name(), best, bestRate, defRate, ratio, strings.Join(per, ", "), met)
	}
	return b.String()
}

// sweepNote explains the sweep modes' rows under the table.
func sweepNote(c config) string {
	if len(sweepModes(c)) == 0 {
		return ""
	}
	def := "the router's defaults: the adaptive in-flight limit per lane, with --window as its ceiling"
	if !c.adaptiveFlag {
		def = "the router's defaults: this binary has no --adaptive-window, so a fixed --window of its default"
	}
	return "Quorum queue and far broker (issue 37): a backlog drain of the -events events by the bare publisher, the router with each fixed --window of -sweep-windows (per lane) and the router with " + def + ". / ceiling is the rate over the bare publisher's in the same mode and run. Quorum queue: nobody consumes; the rate is read from the queue's depth (every 10 ms), so there is no latency. Far broker: the publishers reach RabbitMQ through a proxy that delays every chunk by -far-delay each way; the consumer connects directly; the rate is the drain's (with -far-queue quorum, the quorum mode's queue and rate). median limit: the median of cdc_router_window_limit (the sum over the lanes of their in-flight limit) scraped every -scrape-interval from the router's /metrics; – where the router has no such metric.\n"
}

// depthWatch reads a queue's message count every 10 ms (a passive queue.declare on its own connection)
// and keeps the first sample with messages and the first with all of them.
type depthWatch struct {
	conn *amqp.Connection
	stop chan struct{}
	done chan struct{}

	mu     sync.Mutex
	want   int   // the count whose arrival time is kept in t1; 0: none yet
	t0, t1 int64 // unix ns: the first sample above zero, the first sample at want or more
	c0     int   // the count at t0
	n      int   // the latest count
	err    error
}

func watchDepth(url, queue string) (*depthWatch, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("queue depth: connect to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("queue depth: %w", err)
	}
	d := &depthWatch{conn: conn, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
			now := time.Now().UnixNano()
			d.mu.Lock()
			if err != nil {
				d.err = fmt.Errorf("queue depth: %w", err)
				d.mu.Unlock()
				return
			}
			d.n = q.Messages
			if d.t0 == 0 && q.Messages > 0 {
				d.t0, d.c0 = now, q.Messages
			}
			if d.want > 0 && d.t1 == 0 && q.Messages >= d.want {
				d.t1 = now
			}
			d.mu.Unlock()
			select {
			case <-d.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return d, nil
}

// wait waits until the queue holds n messages, or fails naming how many it does.
func (d *depthWatch) wait(n int, timeout time.Duration, what string) error {
	deadline := time.Now().Add(timeout)
	d.mu.Lock()
	d.want = n
	d.mu.Unlock()
	for {
		d.mu.Lock()
		got, t1, err := d.n, d.t1, d.err
		d.mu.Unlock()
		switch {
		case err != nil:
			return fmt.Errorf("%s: %w (after %d of %d messages)", what, err, got, n)
		case t1 != 0:
			return nil
		case got > n:
			return fmt.Errorf("%s: the queue holds %d messages, more than the %d published", what, got, n)
		case time.Now().After(deadline):
			return fmt.Errorf("%s: the queue holds %d of %d messages after %v (raise -timeout on a slow machine)", what, got, n, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// rate is the messages per second from the first count above zero to the count of all n.
func (d *depthWatch) rate(n int) float64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return depthRate(n, d.c0, d.t0, d.t1)
}

// depthRate is (n - c0) messages over t1 - t0 (unix ns); when all n were counted in the first sample,
// n over the 10 ms between two samples, the least time it can have taken.
func depthRate(n, c0 int, t0, t1 int64) float64 {
	if t1 <= t0 || c0 >= n {
		return float64(n) / 0.010
	}
	return float64(n-c0) / (float64(t1-t0) / 1e9)
}

func (d *depthWatch) close() {
	close(d.stop)
	<-d.done
	d.conn.Close()
}

// sweepLimitPlots are, per sweep mode, the default router's in-flight limit and in-flight events over
// time (from its first scrape), from one run.
func sweepLimitPlots(rs []result, c config) []plotFile {
	var out []plotFile
	for _, m := range sweepModes(c) {
		for _, r := range rs {
			if r.mode != m.name() || r.system != routerDefault {
				continue
			}
			p := plot{title: m.name() + ": the default router", xlabel: "seconds since the router started streaming", ylabel: "in-flight limit and events (all lanes)"}
			if len(r.limits) > 0 {
				p.lines = limitLines(r.limits, r.limits[0].t)
			}
			out = append(out, plotFile{name: "window-limit-" + m.kind + ".svg", plots: []plot{p}})
		}
	}
	return out
}

// limitLines are the limit and the in-flight events of samples as two lines, time in seconds since t0
// (unix ns; samples before it are left out); the limit's line is left out while the router has no such
// metric.
func limitLines(samples []limitSample, t0 int64) []series {
	lim := series{name: "in-flight limit", color: "#2ca02c"}
	inf := series{name: "in flight", color: "#1f77b4"}
	for _, s := range samples {
		x := float64(s.t-t0) / 1e9
		if x < 0 {
			continue
		}
		if !math.IsNaN(s.limit) {
			lim.x, lim.y = append(lim.x, x), append(lim.y, s.limit)
		}
		if !math.IsNaN(s.inflight) {
			inf.x, inf.y = append(inf.x, x), append(inf.y, s.inflight)
		}
	}
	var out []series
	for _, s := range []series{lim, inf} {
		if len(s.x) > 0 {
			out = append(out, s)
		}
	}
	return out
}

// latBin is the latency of the events that arrived in one bin of time.
type latBin struct {
	t        float64 // seconds since the start, the bin's start
	p50, p99 float64 // ms
}

// latencyTimeline bins the events by arrival (recv, unix ns, with lat in the same order) into bins of
// width from start, and gives each non-empty bin's median and 99th percentile latency.
func latencyTimeline(recv, lat []int64, start int64, width time.Duration) []latBin {
	bins := map[int64][]int64{}
	for i, r := range recv {
		k := (r - start) / int64(width)
		bins[k] = append(bins[k], lat[i])
	}
	keys := make([]int64, 0, len(bins))
	for k := range bins {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	out := make([]latBin, 0, len(keys))
	for _, k := range keys {
		v := bins[k]
		sort.Slice(v, func(i, j int) bool { return v[i] < v[j] })
		out = append(out, latBin{t: float64(k) * width.Seconds(), p50: float64(pct(v, 0.5)) / 1e6, p99: float64(pct(v, 0.99)) / 1e6})
	}
	return out
}
