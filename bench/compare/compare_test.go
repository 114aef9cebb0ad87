package main

import (
	"encoding/xml"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCompareTiny runs the whole comparison at a tiny size against the real PostgreSQL and RabbitMQ, the
// snapshot (both row-per-aggregate variants), backlog, one-transaction and hot-aggregate modes included, and checks that
// the table has a row for every publisher in every mode and that the plots are written. It asserts nothing
// about timing: the figures come from `make bench-compare` (docs/benchmarks.md).
func TestCompareTiny(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "compare")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	plots := filepath.Join(dir, "plots")
	cmd := exec.Command(bin, "-events", "300", "-steady", "1s", "-rates", "100,200", "-runs", "1", "-plots", plots,
		"-snapshot-rows", "250", "-snapshot-per-aggregate", "1,10", "-backlog", "220", "-big-txn", "210", "-hot-burst", "200")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("compare: %v\n%s", err, stderr.String())
	}
	rows := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 16 || strings.TrimSpace(cells[1]) == "mode" || strings.HasPrefix(cells[1], "---") {
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
	if len(rows) != 24 {
		t.Errorf("%d rows, want 24:\n%s", len(rows), out)
	}
	for _, name := range []string{"latency-cdf-100.svg", "latency-cdf-200.svg", "drain-throughput.svg"} {
		b, err := os.ReadFile(filepath.Join(plots, name))
		if err != nil {
			t.Errorf("plot not written: %v", err)
			continue
		}
		var svg struct {
			Lines []struct {
				Points string `xml:"points,attr"`
			} `xml:"polyline"`
		}
		if err := xml.Unmarshal(b, &svg); err != nil {
			t.Errorf("%s is not well-formed SVG: %v", name, err)
			continue
		}
		want := 3 // the steady rates' three publishers
		if name == "drain-throughput.svg" {
			want = 4 // and the drain's bare publisher without headers
		}
		if len(svg.Lines) != want {
			t.Errorf("%s has %d lines, want one per publisher (%d)", name, len(svg.Lines), want)
		}
		for i, l := range svg.Lines {
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
