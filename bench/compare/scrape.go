package main

// What the benchmark reads from the router and the machine while a run goes on: the router's in-flight
// limit and in-flight events from its /metrics (issue 37), and the load average at the start and end of
// each run.

import (
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"
)

const (
	metricLimit    = "cdc_router_window_limit"    // the sum over the router's lanes of their current in-flight limit
	metricInflight = "cdc_router_inflight_events" // events handed to the broker connection and not yet confirmed
)

// limitSample is one scrape of the router's /metrics.
type limitSample struct {
	t        int64   // unix ns
	limit    float64 // cdc_router_window_limit; NaN while the router has no such metric
	inflight float64 // cdc_router_inflight_events; NaN when absent
}

// metricValues reads the named metrics from Prometheus's text format: the sum of each metric's samples
// (over its label sets). A metric without a sample is absent from the map.
func metricValues(text string, names ...string) map[string]float64 {
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest := line, ""
		if i := strings.IndexAny(line, "{ \t"); i >= 0 {
			name, rest = line[:i], line[i:]
		}
		if !want[name] {
			continue
		}
		if strings.HasPrefix(rest, "{") {
			j := strings.LastIndexByte(rest, '}')
			if j < 0 {
				continue
			}
			rest = rest[j+1:]
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			continue
		}
		out[name] += v
	}
	return out
}

// scraper reads the router's /metrics every interval until end.
type scraper struct {
	stop chan struct{}
	done chan []limitSample
}

// scrape starts scraping http://addr/metrics; with addr empty or every 0 it does nothing (end returns
// none). A failed scrape (the router not listening yet, or restarting) is skipped.
func scrape(addr string, every time.Duration) *scraper {
	if addr == "" || every <= 0 {
		return nil
	}
	s := &scraper{stop: make(chan struct{}), done: make(chan []limitSample, 1)}
	go func() {
		client := &http.Client{Timeout: time.Second}
		tick := time.NewTicker(every)
		defer tick.Stop()
		var samples []limitSample
		for {
			t0 := time.Now().UnixNano()
			if v, ok := scrapeOnce(client, addr); ok {
				// The router read its gauges somewhere between the request and the response: the middle.
				smp := limitSample{t: (t0 + time.Now().UnixNano()) / 2, limit: math.NaN(), inflight: math.NaN()}
				if x, ok := v[metricLimit]; ok {
					smp.limit = x
				}
				if x, ok := v[metricInflight]; ok {
					smp.inflight = x
				}
				samples = append(samples, smp)
			}
			select {
			case <-s.stop:
				s.done <- samples
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func scrapeOnce(client *http.Client, addr string) (map[string]float64, bool) {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return nil, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return nil, false
	}
	return metricValues(string(body), metricLimit, metricInflight), true
}

// end stops the scraper and returns its samples.
func (s *scraper) end() []limitSample {
	if s == nil {
		return nil
	}
	close(s.stop)
	return <-s.done
}

// medianLimit is the median of the samples' limit; -1 when no sample has one (the metric does not
// exist, or nothing was scraped).
func medianLimit(samples []limitSample) float64 {
	var v []float64
	for _, s := range samples {
		if !math.IsNaN(s.limit) {
			v = append(v, s.limit)
		}
	}
	if len(v) == 0 {
		return -1
	}
	return median(v)
}

// freeAddr is a free 127.0.0.1 port for the router's --http-addr.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// loadAverage is the machine's 1-, 5- and 15-minute load average, as /proc/loadavg has it ("?" if it
// cannot be read).
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// runLoad is the load average at the start and the end of one run.
type runLoad struct{ start, end string }

// loadHeader is the line above the table that gives each run's load average.
func loadHeader(loads []runLoad) string {
	if len(loads) == 0 {
		return ""
	}
	parts := make([]string, len(loads))
	for i, l := range loads {
		parts[i] = fmt.Sprintf("run %d %s → %s", i+1, l.start, l.end)
	}
	return "Load average (1, 5, 15 min) at the start → end of each run: " + strings.Join(parts, "; ") + ".\n\n"
}
