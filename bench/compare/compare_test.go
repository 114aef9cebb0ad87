package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestCompareTiny runs the whole comparison at a tiny size against the real PostgreSQL and RabbitMQ, the
// snapshot (both row-per-aggregate variants), backlog, one-transaction, hot-aggregate and far-broker
// (on a quorum queue) modes included, and checks that the table has a row for every publisher in every mode, the
// load average above it, the sweep's summary below it, and that the plots are written. It asserts nothing
// about timing: the figures come from `make bench-compare` (docs/benchmarks.md).
func TestCompareTiny(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "compare")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	plots := filepath.Join(dir, "plots")
	cmd := exec.Command(bin, "-events", "300", "-steady", "1s", "-rates", "100,200", "-runs", "1", "-plots", plots,
		"-snapshot-rows", "250", "-snapshot-per-aggregate", "1,10", "-backlog", "220", "-big-txn", "210", "-hot-burst", "200",
		"-modes", "drain,steady,far", "-far-queue", "quorum", "-sweep-windows", "64")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("compare: %v\n%s", err, stderr.String())
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 17 || strings.TrimSpace(cells[1]) == "mode" || strings.HasPrefix(cells[1], "---") {
			continue
		}
		rows[strings.TrimSpace(cells[1])+"/"+strings.TrimSpace(cells[2])] = line
	}
	for _, mode := range []string{"drain", "steady 100/s", "steady 200/s"} {
		systems := []string{"bare publisher", "cdc-router", "polling publisher", "inserts only"}
		if mode == "drain" {
			systems = []string{"bare publisher", "bare publisher, no headers", "cdc-router", "polling publisher"}
		}
		for _, sys := range systems {
			row, ok := rows[mode+"/"+sys]
			if !ok {
				t.Errorf("no row for %s, %s in:\n%s", mode, sys, out)
				continue
			}
			want := map[string]string{"drain": "300", "steady 100/s": "100", "steady 200/s": "200"}[mode]
			if got := strings.TrimSpace(strings.Split(row, "|")[3]); got != want {
				t.Errorf("%s, %s: %s events in the table, want %s", mode, sys, got, want)
			}
		}
	}
	// The extra modes: the bare publisher over the same number of messages, and the router.
	for mode, want := range map[string]string{"snapshot, 1 row/aggregate": "250", "snapshot, 10 rows/aggregate": "250",
		"backlog": "220", "one transaction": "210", "hot aggregate, --aggregate-window 1": "200",
		"hot aggregate, --aggregate-window 64": "200"} {
		for _, sys := range []string{"bare publisher", "cdc-router"} {
			row, ok := rows[mode+"/"+sys]
			if !ok {
				t.Errorf("no row for %s, %s in:\n%s", mode, sys, out)
				continue
			}
			if got := strings.TrimSpace(strings.Split(row, "|")[3]); got != want {
				t.Errorf("%s, %s: %s events in the table, want %s", mode, sys, got, want)
			}
		}
	}
	// A sweep mode (one only, to keep the test cheap: the far broker's proxy in front of the quorum
	// mode's queue, nobody consuming): the bare publisher, the fixed window, the default, over the drain's
	// events.
	for _, mode := range []string{"far broker, 1ms each way, quorum queue, no consumer"} {
		for _, sys := range []string{"bare publisher", "cdc-router, --window 64 fixed", "cdc-router, default"} {
			row, ok := rows[mode+"/"+sys]
			if !ok {
				t.Errorf("no row for %s, %s in:\n%s", mode, sys, out)
				continue
			}
			if got := strings.TrimSpace(strings.Split(row, "|")[3]); got != "300" {
				t.Errorf("%s, %s: %s events in the table, want 300", mode, sys, got)
			}
		}
		if !strings.Contains(string(out), "| "+mode+" | 64 | ") {
			t.Errorf("the sweep summary has no line for %s:\n%s", mode, out)
		}
	}
	if len(rows) != 27 {
		t.Errorf("%d rows, want 27:\n%s", len(rows), out)
	}
	if !strings.HasPrefix(string(out), "Load average (1, 5, 15 min) at the start → end of each run: run 1 ") {
		t.Errorf("the table does not start with the load average:\n%s", out)
	}
	// The default router's limit in the sweep mode (a drain of 300 events: too short for a line to check).
	if b, err := os.ReadFile(filepath.Join(plots, "window-limit-far.svg")); err != nil || xml.Unmarshal(b, new(struct{})) != nil {
		t.Errorf("window-limit-far.svg not written or not well-formed: %v", err)
	}
	for _, name := range []string{"latency-cdf-100.svg", "latency-cdf-200.svg", "drain-throughput.svg", "window-limit-100.svg", "window-limit-200.svg"} {
		b, err := os.ReadFile(filepath.Join(plots, name))
		if err != nil {
			t.Errorf("plot not written: %v", err)
			continue
		}
		type polyline struct {
			Points string `xml:"points,attr"`
		}
		var svg struct {
			Plots []struct {
				Lines []polyline `xml:"polyline"`
			} `xml:"g"`
		}
		if err := xml.Unmarshal(b, &svg); err != nil {
			t.Errorf("%s is not well-formed SVG: %v", name, err)
			continue
		}
		var lines []polyline
		for _, p := range svg.Plots {
			lines = append(lines, p.Lines...)
		}
		want := 3 // the steady rates' three publishers
		switch {
		case name == "drain-throughput.svg":
			want = 4 // and the drain's bare publisher without headers
		case strings.HasPrefix(name, "window-limit-"):
			// The router's in flight (and its limit, once the router has cdc_router_window_limit) above its
			// latency's p50 and p99 and the poller's p99.
			want = 4
			if strings.Contains(string(b), ">in-flight limit<") {
				want = 5
			}
		}
		if len(lines) != want {
			t.Errorf("%s has %d lines, want %d", name, len(lines), want)
		}
		for i, l := range lines {
			if strings.Count(l.Points, ",") < 2 {
				t.Errorf("%s: line %d has fewer than two points: %q", name, i, l.Points)
			}
		}
	}
}

// TestBrokerProcess: -1 measures nothing and says nothing; a pid that does not exist is refused naming the
// fix; a broker off this machine is not measured, whatever beam.smp runs here; a pid that exists is used.
func TestBrokerProcess(t *testing.T) {
	if pid, why := brokerProcess(-1, "amqp://guest:guest@127.0.0.1:5672/"); pid != 0 || why != "" {
		t.Errorf("-1: %d %q, want nothing measured, nothing said", pid, why)
	}
	if pid, why := brokerProcess(1<<30, "amqp://127.0.0.1/"); pid != 0 || !strings.Contains(why, "no such process") || !strings.Contains(why, "-1 for none") {
		t.Errorf("a missing pid: %d %q, want a refusal naming the fix", pid, why)
	}
	if pid, why := brokerProcess(0, "amqp://guest:guest@rabbit.example.com:5672/"); pid != 0 || !strings.Contains(why, "not on this machine") {
		t.Errorf("a remote broker: %d %q, want it not measured", pid, why)
	}
	if pid, why := brokerProcess(os.Getpid(), "amqp://rabbit.example.com/"); pid != os.Getpid() || why != "" {
		t.Errorf("an existing pid: %d %q, want it used", pid, why)
	}
}

// timedWriter records when each write happened and what it wrote.
type timedWriter struct {
	mu     sync.Mutex
	writes []timedWrite
}

type timedWrite struct {
	at time.Time
	b  []byte
}

func (w *timedWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.writes = append(w.writes, timedWrite{time.Now(), append([]byte(nil), b...)})
	return len(b), nil
}

// TestForwardDelaysEachChunkFromItsArrival: forward writes no chunk before its due time (arrival + the
// delay), keeps the order, and delays chunks that arrive back to back by the delay once, not once each (a
// stop-and-wait relay of 20 chunks at 30 ms would take 600 ms).
func TestForwardDelaysEachChunkFromItsArrival(t *testing.T) {
	const d = 30 * time.Millisecond
	q := make(chan chunk, 100)
	w := &timedWriter{}
	done := make(chan error, 1)
	go func() { done <- forward(w, q) }()
	start := time.Now()
	var dues []time.Time
	var want bytes.Buffer
	for i := 0; i < 20; i++ {
		b := []byte{byte('a' + i)}
		due := time.Now().Add(d)
		dues = append(dues, due)
		want.Write(b)
		q <- chunk{due: due, b: b}
		time.Sleep(time.Millisecond)
	}
	close(q)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	var got bytes.Buffer
	i := 0
	for _, wr := range w.writes {
		for range wr.b {
			if wr.at.Before(dues[i]) {
				t.Errorf("byte %d written %v before it was due", i, dues[i].Sub(wr.at))
			}
			i++
		}
		got.Write(wr.b)
	}
	if got.String() != want.String() {
		t.Errorf("forwarded %q, want %q", got.String(), want.String())
	}
	if took > 300*time.Millisecond {
		t.Errorf("20 chunks 1 ms apart with a 30 ms delay took %v: each waited for the one before (stop-and-wait), want about 50 ms", took)
	}
}

// TestDelayProxy: through the proxy, a round trip to an echo server takes at least twice the one-way
// delay, and 50 messages written 1 ms apart all come back within about 50 ms plus one round trip, not
// 50 round trips.
func TestDelayProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(c, c); c.Close() }()
		}
	}()
	const d = 20 * time.Millisecond
	p, err := newDelayProxy(ln.Addr().String(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer p.close()
	c, err := net.Dial("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 64)
	start := time.Now()
	if _, err := c.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, buf[:1]); err != nil {
		t.Fatal(err)
	}
	if rtt := time.Since(start); rtt < 2*d {
		t.Errorf("round trip %v through a proxy delaying %v each way, want at least %v", rtt, d, 2*d)
	}
	start = time.Now()
	go func() {
		for i := 0; i < 50; i++ {
			c.Write([]byte("y"))
			time.Sleep(time.Millisecond)
		}
	}()
	if _, err := io.ReadFull(c, buf[:50]); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 2*d || took > 600*time.Millisecond {
		t.Errorf("50 messages 1 ms apart came back after %v, want at least %v and about 50 ms + %v (50 round trips would be %v)", took, 2*d, 2*d, 50*2*d)
	}
	if u, err := p.url("amqp://guest:guest@127.0.0.1:5672/vh"); err != nil || u != "amqp://guest:guest@"+p.addr+"/vh" {
		t.Errorf("proxy url: %q, %v", u, err)
	}
	if a, err := brokerAddr("amqp://guest:guest@localhost/"); err != nil || a != "localhost:5672" {
		t.Errorf("brokerAddr without a port: %q, %v", a, err)
	}
}

// TestMetricValues reads gauges with and without labels, sums a metric's series, and leaves out a metric
// the text does not have (the router before cdc_router_window_limit exists).
func TestMetricValues(t *testing.T) {
	text := `# HELP cdc_router_inflight_events Events handed to the broker.
# TYPE cdc_router_inflight_events gauge
cdc_router_inflight_events 37
cdc_router_inflight_events_total 5
cdc_router_window_limit{lane="0"} 64
cdc_router_window_limit{lane="1",note="a } b"} 1.28e+02
`
	v := metricValues(text, metricLimit, metricInflight)
	if v[metricInflight] != 37 || v[metricLimit] != 192 || len(v) != 2 {
		t.Errorf("metricValues: %v, want inflight 37 and limit 192", v)
	}
	v = metricValues("cdc_router_inflight_events 3\n", metricLimit, metricInflight)
	if _, ok := v[metricLimit]; ok || v[metricInflight] != 3 {
		t.Errorf("without the limit metric: %v, want inflight only", v)
	}
	nan := math.NaN()
	if got := medianLimit([]limitSample{{limit: nan}, {limit: 10}, {limit: 30}, {limit: 20}}); got != 20 {
		t.Errorf("medianLimit: %v, want 20 (NaN samples left out)", got)
	}
	if got := medianLimit([]limitSample{{limit: nan, inflight: 3}}); got != -1 {
		t.Errorf("medianLimit without the metric: %v, want -1", got)
	}
	if got := limitCell([]result{{limits: []limitSample{{limit: nan}}}}); got != "–" {
		t.Errorf("limitCell without the metric: %q, want –", got)
	}
}

// TestSweepSummary: the default is compared with the fixed window of the highest median rate, per run
// against that window's run, and the target (0.95) is judged on the medians.
func TestSweepSummary(t *testing.T) {
	c := config{modes: map[string]bool{"quorum": true, "far": true}, sweepWindows: []int{32, 512}, farDelay: time.Millisecond, runs: 3}
	rates := func(v ...float64) []result {
		var rs []result
		for _, x := range v {
			rs = append(rs, result{rate: x})
		}
		return rs
	}
	q, f := sweepModes(c)[0].name(), sweepModes(c)[1].name()
	all := map[string][]result{
		q + "/" + fixedName(32): rates(100, 110, 90), q + "/" + fixedName(512): rates(200, 180, 220), q + "/" + routerDefault: rates(190, 200, 210),
		f + "/" + fixedName(32): rates(300, 300, 300), f + "/" + fixedName(512): rates(100, 100, 100), f + "/" + routerDefault: rates(270, 280, 290),
	}
	got := sweepSummary(c, all)
	for _, want := range []string{
		"| quorum queue, no consumer | 512 | 200 | 200 | 1.00 | 0.95, 1.11, 0.95 | yes |",
		"| far broker, 1ms each way | 32 | 300 | 280 | 0.93 | 0.90, 0.93, 0.97 | no |",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("sweep summary lacks %q:\n%s", want, got)
		}
	}
	if s := sweepSystems(c.sweepWindows); strings.Join(s, "; ") != "bare publisher; cdc-router, --window 32 fixed; cdc-router, --window 512 fixed; cdc-router, default" {
		t.Errorf("sweep rows: %q", s)
	}
	if a := strings.Join(windowArgs(64, true), " "); a != "--adaptive-window=false --window 64" {
		t.Errorf("fixed window with --adaptive-window: %q", a)
	}
	if a := strings.Join(windowArgs(64, false), " "); a != "--window 64" {
		t.Errorf("fixed window without --adaptive-window: %q", a)
	}
}

// TestDepthRate: the messages counted after the first sample over the time between the samples.
func TestDepthRate(t *testing.T) {
	if r := depthRate(1000, 100, 0, int64(300*time.Millisecond)); r != 3000 {
		t.Errorf("depthRate: %v, want 3000", r)
	}
	if r := depthRate(1000, 1000, 5, 5); r != 100_000 {
		t.Errorf("depthRate of one sample: %v, want 1000 in 10 ms", r)
	}
}

func TestParseModesAndLoadHeader(t *testing.T) {
	if m, err := parseModes("quorum, far"); err != nil || len(m) != 2 || !m["quorum"] || !m["far"] {
		t.Errorf("parseModes: %v %v", m, err)
	}
	if m, err := parseModes("all"); err != nil || len(m) != len(allModes) {
		t.Errorf("parseModes(all): %v %v", m, err)
	}
	if _, err := parseModes("drain,qourum"); err == nil || !strings.Contains(err.Error(), "drain, steady, quorum, far") {
		t.Errorf("a misspelt mode: %v, want a refusal naming the modes", err)
	}
	h := loadHeader([]runLoad{{"0.10 0.20 0.30", "1.00 0.50 0.40"}, {"1.10 0.60 0.40", "2.00 1.00 0.50"}})
	if h != "Load average (1, 5, 15 min) at the start → end of each run: run 1 0.10 0.20 0.30 → 1.00 0.50 0.40; run 2 1.10 0.60 0.40 → 2.00 1.00 0.50.\n\n" {
		t.Errorf("loadHeader: %q", h)
	}
	if f := strings.Fields(loadAverage()); len(f) != 3 {
		t.Errorf("loadAverage: %q, want three figures", loadAverage())
	}
}

// TestLatencyTimeline bins by arrival and gives each bin's median and 99th percentile.
func TestLatencyTimeline(t *testing.T) {
	ms := int64(time.Millisecond)
	recv := []int64{1000 * ms, 1100 * ms, 1200 * ms, 1600 * ms}
	lat := []int64{3 * ms, 1 * ms, 2 * ms, 9 * ms}
	got := latencyTimeline(recv, lat, 1000*ms, 250*time.Millisecond)
	want := []latBin{{t: 0, p50: 2, p99: 2}, {t: 0.5, p50: 9, p99: 9}}
	if len(got) != len(want) {
		t.Fatalf("latencyTimeline: %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("bin %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
