package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func pct(sorted []int64, p float64) int64 {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))]
}

// ms formats nanoseconds as milliseconds with three significant digits or so.
func ms(ns int64) string {
	v := float64(ns) / 1e6
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func pick(rs []result, f func(result) float64) []float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return v
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// tableHead is the Markdown table's header.
const tableHead = "| mode | publisher | events | offered/s | events/s | / ceiling | p50 ms | p95 ms | p99 ms | max ms | publisher CPU µs/event | PostgreSQL CPU µs/event | RabbitMQ CPU µs/event | peak RSS MiB | median limit |\n" +
	"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n"

// table is the Markdown table of medians over the runs, under the load average of each run. The ratio is
// each run's rate over the bare publisher's drain rate in the same run, then the median of those.
func table(c config, modes []int, all map[string][]result, loads []runLoad) string {
	var b strings.Builder
	b.WriteString(loadHeader(loads))
	b.WriteString(tableHead)
	ceiling := all[modeName(0)+"/"+bare]
	for _, rate := range modes {
		for _, sys := range systemsOf(rate) {
			rs := all[modeName(rate)+"/"+sys]
			if len(rs) == 0 {
				continue
			}
			if sys == inserts {
				fmt.Fprintf(&b, "| %s | %s | %d | %.0f | – | – | – | – | – | – | – | %.1f | – | – | – |\n", modeName(rate), sys, rs[0].events,
					median(pick(rs, func(r result) float64 { return r.offered })), median(pick(rs, func(r result) float64 { return r.pgPerEvent })))
				continue
			}
			offered := "–"
			if rate > 0 && sys != bare {
				offered = fmt.Sprintf("%.0f", median(pick(rs, func(r result) float64 { return r.offered })))
			}
			writeRow(&b, modeName(rate), sys, rs, ceiling, offered, !isBare(sys))
		}
	}
	extraRows(&b, c, all)
	sweepRows(&b, c, all)
	if c.runs > 1 {
		fmt.Fprintf(&b, "\nMedians of %d runs. ", c.runs)
	} else {
		b.WriteString("\nOne run. ")
	}
	b.WriteString("offered/s: the commits per second the load generator reached (it aims at the mode's rate; the bare publisher paces itself). inserts only: the load generator with no publisher, so a publisher's cost on PostgreSQL is its figure minus this one. / ceiling: events/s over the bare publisher's drain rate in the same run; the bare publisher sends the router's 5 headers and 3 properties (-bare-headers), and the drain's \"no headers\" row is the same publisher without them. Latency: insert (or, for the bare publisher, publish) to consumer; in the drain it is the age of the backlog. RabbitMQ CPU: the node's whole process over the same window as the publisher's, its deliveries to the consumer included. median limit: the router's cdc_router_window_limit, scraped from its /metrics every -scrape-interval while it runs (– for the other publishers, or while the router has no such metric).\n")
	b.WriteString(extraNote(c))
	b.WriteString(sweepNote(c))
	b.WriteString(sweepSummary(c, all))
	return b.String()
}

// writeRow writes the row of one publisher in one mode: the medians over its runs rs. / ceiling is each
// run's rate over ceiling's in the same run (– without a ceiling); latency – without deliveries.
func writeRow(b *strings.Builder, mode, sys string, rs, ceiling []result, offered string, pg bool) {
	if len(rs) == 0 {
		return
	}
	m := func(f func(r result) float64) float64 { return median(pick(rs, f)) }
	ratio := "–"
	if len(ceiling) >= len(rs) {
		ratios := make([]float64, len(rs))
		for i, r := range rs {
			ratios[i] = r.rate / ceiling[i].rate
		}
		ratio = fmt.Sprintf("%.2f", median(ratios))
	}
	lat := func(p float64) string {
		if len(rs[0].lat) == 0 {
			return "–"
		}
		return ms(int64(m(func(r result) float64 { return float64(pct(r.lat, p)) })))
	}
	pgcpu := "–"
	if pg {
		pgcpu = fmt.Sprintf("%.1f", m(func(r result) float64 { return r.pgPerEvent }))
	}
	fmt.Fprintf(b, "| %s | %s | %d | %s | %.0f | %s | %s | %s | %s | %s | %.1f | %s | %s | %.1f | %s |\n",
		mode, sys, rs[0].events, offered, m(func(r result) float64 { return r.rate }), ratio,
		lat(0.5), lat(0.95), lat(0.99), lat(1), m(func(r result) float64 { return r.cpuPerEvent }), pgcpu,
		brokerCell(rs), m(func(r result) float64 { return r.rss }), limitCell(rs))
}

// limitCell is the median over the runs of each run's median in-flight limit, or – when no run has one.
func limitCell(rs []result) string {
	var v []float64
	for _, r := range rs {
		if l := medianLimit(r.limits); l >= 0 {
			v = append(v, l)
		}
	}
	if len(v) == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", median(v))
}

// brokerCell is the median of the RabbitMQ node's CPU per event, or – when it was not measured.
func brokerCell(rs []result) string {
	m := median(pick(rs, func(r result) float64 { return r.mqPerEvent }))
	if len(rs) == 0 || m < 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f", m)
}

var colors = map[string]string{bare: "#888888", bareNoHeaders: "#bbbbbb", router: "#1f77b4", poll: "#d62728"}

// plotFile is one SVG file of one or more plots, one above the other.
type plotFile struct {
	name  string
	plots []plot
}

// writePlots writes, from one run, the latency CDF of each steady rate, the drain's throughput over time,
// and for each steady rate the router's in-flight limit over time above the latency over time (issue 37),
// and the default router's limit in each sweep mode.
func writePlots(dir string, rs []result, c config) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var files []plotFile
	for _, rate := range c.rates {
		if !c.modes["steady"] {
			break
		}
		p := plot{title: fmt.Sprintf("Insert-to-consumer latency at %d events/s", rate),
			xlabel: "latency, ms (log scale)", ylabel: "fraction of events at or below", logX: true}
		for _, r := range rs {
			if r.mode != modeName(rate) || r.system == inserts {
				continue
			}
			s := series{name: r.system, color: colors[r.system]}
			n := len(r.lat)
			for i := 0; i < 500 && n > 0; i++ {
				j := i * (n - 1) / 499
				s.x, s.y = append(s.x, float64(r.lat[j])/1e6), append(s.y, float64(j+1)/float64(n))
			}
			p.lines = append(p.lines, s)
		}
		files = append(files, plotFile{name: fmt.Sprintf("latency-cdf-%d.svg", rate), plots: []plot{p}}, limitPlot(rs, rate))
	}
	if c.modes["drain"] {
		p := plot{title: "Backlog drain: throughput over time", xlabel: "seconds since the first delivery", ylabel: "events/s (250 ms bins)"}
		for _, r := range rs {
			if r.mode != modeName(0) || len(r.recv) == 0 {
				continue
			}
			const bin = 250e6
			first := r.recv[0]
			counts := make([]float64, int((r.recv[len(r.recv)-1]-first)/bin)+1)
			for _, t := range r.recv {
				counts[int((t-first)/bin)]++
			}
			s := series{name: r.system, color: colors[r.system]}
			for i, c := range counts {
				s.x, s.y = append(s.x, float64(i)*bin/1e9, float64(i+1)*bin/1e9), append(s.y, c*1e9/bin, c*1e9/bin)
			}
			p.lines = append(p.lines, s)
		}
		files = append(files, plotFile{name: "drain-throughput.svg", plots: []plot{p}})
	}
	files = append(files, sweepLimitPlots(rs, c)...)
	for _, f := range files {
		if err := writeSVG(filepath.Join(dir, f.name), f.plots...); err != nil {
			return err
		}
	}
	return nil
}

// limitPlot is, at one steady rate, the router's in-flight limit and in-flight events over time, above
// the latency over time (p50 and p99 of 250 ms bins of arrival) of the router and the polling publisher;
// time from the first insert.
func limitPlot(rs []result, rate int) plotFile {
	top := plot{title: fmt.Sprintf("The router's in-flight limit at %d events/s", rate),
		xlabel: "seconds since the first insert", ylabel: "messages (all lanes)"}
	bottom := plot{title: fmt.Sprintf("Insert-to-consumer latency over time at %d events/s", rate),
		xlabel: "seconds since the first insert", ylabel: "ms, 250 ms bins (log scale)", logY: true}
	for _, r := range rs {
		if r.mode != modeName(rate) {
			continue
		}
		switch r.system {
		case router:
			top.lines = limitLines(r.limits, r.start)
			p50 := series{name: "cdc-router p50", color: "#9ecae1"}
			p99 := series{name: "cdc-router p99", color: colors[router]}
			for _, bin := range r.timeline {
				p50.x, p50.y = append(p50.x, bin.t), append(p50.y, bin.p50)
				p99.x, p99.y = append(p99.x, bin.t), append(p99.y, bin.p99)
			}
			bottom.lines = append(bottom.lines, p50, p99)
		case poll:
			p99 := series{name: "poller p99", color: colors[poll]}
			for _, bin := range r.timeline {
				p99.x, p99.y = append(p99.x, bin.t), append(p99.y, bin.p99)
			}
			bottom.lines = append(bottom.lines, p99)
		}
	}
	for _, p := range []plot{top, bottom} { // one time axis for both
		for _, l := range p.lines {
			for _, x := range l.x {
				top.xmax, bottom.xmax = math.Max(top.xmax, x), math.Max(bottom.xmax, x)
			}
		}
	}
	return plotFile{name: fmt.Sprintf("window-limit-%d.svg", rate), plots: []plot{top, bottom}}
}
