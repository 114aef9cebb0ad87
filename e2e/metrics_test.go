package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// scrape is one /metrics answer: the value of each series, keyed as the exposition writes it
// (name{label="value",...}, labels sorted), and the text itself.
type scrape struct {
	text   string
	series map[string]float64
}

func scrapeMetrics(t testing.TB, addr string) scrape {
	t.Helper()
	code, body := get(t, "http://"+addr+"/metrics")
	if code != 200 {
		t.Fatalf("/metrics answered %d: %s", code, body)
	}
	s := scrape{text: body, series: map[string]float64{}}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("/metrics line %q: %v", line, err)
		}
		s.series[line[:i]] = v
	}
	return s
}

// value is a series' value; the test fails when the router does not export it.
func (s scrape) value(t testing.TB, series string) float64 {
	t.Helper()
	v, ok := s.series[series]
	if !ok {
		t.Fatalf("/metrics has no series %s:\n%s", series, s.routerLines())
	}
	return v
}

// names are the metric names of the scrape (a histogram's with their _bucket, _sum and _count suffixes).
func (s scrape) names() map[string]bool {
	n := map[string]bool{}
	for k := range s.series {
		if i := strings.IndexByte(k, '{'); i >= 0 {
			k = k[:i]
		}
		n[k] = true
	}
	return n
}

func (s scrape) routerLines() string {
	var out []string
	for _, l := range strings.Split(s.text, "\n") {
		if strings.HasPrefix(l, "cdc_router_") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// waitMetric scrapes until ok holds for the scrape, and returns it.
func waitMetric(t testing.TB, addr, what string, timeout time.Duration, ok func(scrape) bool) scrape {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		s := scrapeMetrics(t, addr)
		if ok(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last scrape:\n%s", what, timeout, s.routerLines())
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestMetricsUnderLoad scrapes a router while a writer commits events steadily. The published counter and
// both latency histograms move; the slot's health is reported; while the router's broker connection is
// stalled (the test proxy stops forwarding: to the router it looks like a broker alarm, and no other client
// of the shared broker is touched) the lag in seconds and the age of the oldest unconfirmed event grow and
// events stay in flight; after the stall they return to zero and every event arrives. The scrape passes
// promtool check metrics, and every metric the dashboard and the alert rules use is in it.
func TestMetricsUnderLoad(t *testing.T) {
	promtool := testenv.Promtool(t)
	e := newStreamEnv(t)
	// A WAL limit for the slot, so that safe_wal_size and max_slot_wal_keep_size are reported (the cluster
	// belongs to this test binary; nothing here comes near 4 GB of WAL).
	e.exec(`ALTER SYSTEM SET max_slot_wal_keep_size = '4GB'`)
	e.exec(`SELECT pg_reload_conf()`)
	t.Cleanup(func() { e.exec(`ALTER SYSTEM RESET max_slot_wal_keep_size`); e.exec(`SELECT pg_reload_conf()`) })
	c := e.consume(e.queue)
	p := testenv.NewProxy(t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
	addr := freeAddr(t)
	r := e.start("amqp://guest:guest@"+p.Addr+"/", "--http-addr", addr, "--progress-interval", "2s", "--confirm-timeout", "6s")
	r.waitLog("msg=streaming ", 30*time.Second)

	w := newWriter(t, e.pgURL, 20)
	stop, written := make(chan struct{}), make(chan struct{})
	go func() { // steady load: a small transaction every 50 ms until stop
		defer close(written)
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				w.write(3, 3, 0)
			}
		}
	}()
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-written
	}()

	s := waitMetric(t, addr, "events published, confirm histograms filled, slot health read", 30*time.Second, func(s scrape) bool {
		return s.series[`cdc_router_events_published_total{source="stream"}`] >= 30 &&
			s.series["cdc_router_commit_to_confirm_seconds_count"] >= 30 &&
			s.series["cdc_router_confirm_round_trip_seconds_count"] >= 30 &&
			s.series["cdc_router_slot_health_checked_timestamp_seconds"] > 0
	})
	if v := s.value(t, `cdc_router_state{state="streaming"}`); v != 1 {
		t.Errorf(`cdc_router_state{state="streaming"} = %v, want 1`, v)
	}
	if v := s.value(t, "cdc_router_slot_active"); v != 1 {
		t.Errorf("cdc_router_slot_active = %v, want 1", v)
	}
	if v := s.value(t, `cdc_router_slot_wal_status{wal_status="reserved"}`); v != 1 {
		t.Errorf(`cdc_router_slot_wal_status{wal_status="reserved"} = %v, want 1`, v)
	}
	if v := s.value(t, "cdc_router_slot_max_wal_keep_size_bytes"); v != 4<<30 {
		t.Errorf("cdc_router_slot_max_wal_keep_size_bytes = %v, want 4 GiB", v)
	}
	// PostgreSQL counts safe_wal_size from the end of the checkpoint's WAL segments, so it can exceed the limit
	// a little; far from it, or zero, would be wrong.
	if safe := s.value(t, "cdc_router_slot_safe_wal_size_bytes"); safe <= 1<<30 || safe > 8<<30 {
		t.Errorf("cdc_router_slot_safe_wal_size_bytes = %v, want about 4 GiB", safe)
	}
	if v := s.value(t, "cdc_router_slot_retained_wal_bytes"); v <= 0 {
		t.Errorf("cdc_router_slot_retained_wal_bytes = %v, want > 0", v)
	}
	if !strings.Contains(s.text, `cdc_router_build_info{goversion="go`) || s.series["process_resident_memory_bytes"] <= 0 ||
		s.series["go_goroutines"] <= 0 {
		t.Errorf("build_info, process or Go metrics missing:\n%s", s.text)
	}
	// Under a light load the router keeps up: the lag is below a few seconds.
	if lag := s.value(t, "cdc_router_replication_lag_seconds"); lag > 5 {
		t.Errorf("lag %v s under a light load with the broker available", lag)
	}

	checkMetricsWithPromtool(t, promtool, s)
	checkReferencedMetrics(t, s)

	// The stall: confirms stop, events pile up in flight, and the lag grows with the wall clock.
	p.Pause()
	stalled := time.Now()
	first := waitMetric(t, addr, "lag and oldest unconfirmed age at 2 s or more while the broker stalls", 30*time.Second, func(s scrape) bool {
		return s.series["cdc_router_replication_lag_seconds"] >= 2 && s.series["cdc_router_oldest_unconfirmed_event_age_seconds"] >= 2
	})
	if first.value(t, "cdc_router_inflight_events") < 1 || first.value(t, "cdc_router_inflight_bytes") < 1 {
		t.Errorf("nothing in flight while the broker stalls:\n%s", first.routerLines())
	}
	time.Sleep(2 * time.Second)
	second := scrapeMetrics(t, addr)
	lag1, lag2 := first.value(t, "cdc_router_replication_lag_seconds"), second.value(t, "cdc_router_replication_lag_seconds")
	t.Logf("broker stalled for %v: lag %.1f s, then %.1f s; oldest unconfirmed %.1f s; in flight %v events, %v bytes",
		time.Since(stalled).Round(time.Second), lag1, lag2, second.value(t, "cdc_router_oldest_unconfirmed_event_age_seconds"),
		second.value(t, "cdc_router_inflight_events"), second.value(t, "cdc_router_inflight_bytes"))
	if lag2 < lag1+1 {
		t.Errorf("the lag did not grow while the broker stalled: %.1f s, 2 s later %.1f s", lag1, lag2)
	}
	p.Resume()
	close(stop)
	<-written
	resumed := time.Now()
	back := waitMetric(t, addr, "lag, oldest unconfirmed age and in-flight events back to 0 after the stall", 60*time.Second, func(s scrape) bool {
		return s.series["cdc_router_replication_lag_seconds"] == 0 && s.series["cdc_router_oldest_unconfirmed_event_age_seconds"] == 0 &&
			s.series["cdc_router_inflight_events"] == 0
	})
	t.Logf("lag back to 0 %v after the stall ended", time.Since(resumed).Round(100*time.Millisecond))
	t.Logf("the scrape under load, before the stall:\n%s", s.routerLines())
	c.waitFor(t, w.rows, 60*time.Second)
	if got := back.value(t, `cdc_router_events_published_total{source="stream"}`); got < float64(len(w.rows)) {
		// Every row is confirmed once at least (a restart may publish some twice).
		t.Errorf("cdc_router_events_published_total{source=\"stream\"} = %v, want at least the %d rows written", got, len(w.rows))
	}
	if lb := back.value(t, "cdc_router_replication_lag_bytes"); lb > 1<<20 {
		t.Errorf("cdc_router_replication_lag_bytes = %v once caught up", lb)
	}

	// A stall longer than --confirm-timeout: the stream restarts (cause broker), and the lag goes on growing
	// while the router restarts (its new broker connection hangs in the stalled proxy until the stall ends).
	// That a new session does not read 0 until it has read the transactions again is TestLagGoesOnThroughARestart's.
	p.Pause()
	w.write(30, 3, 0)
	waitMetric(t, addr, "lag at 1 s or more in the second stall", 30*time.Second, func(s scrape) bool {
		return s.series["cdc_router_replication_lag_seconds"] >= 1
	})
	zeroes, scrapes := 0, 0
	for end := time.Now().Add(12 * time.Second); time.Now().Before(end); time.Sleep(250 * time.Millisecond) {
		scrapes++
		if scrapeMetrics(t, addr).series["cdc_router_replication_lag_seconds"] == 0 {
			zeroes++
		}
	}
	long := scrapeMetrics(t, addr)
	restarts, lag := long.value(t, `cdc_router_stream_restarts_total{cause="broker"}`), long.value(t, "cdc_router_replication_lag_seconds")
	t.Logf("a 13 s stall with --confirm-timeout 6s: %v restarts (broker), lag %.1f s, %d of %d scrapes with lag 0", restarts, lag, zeroes, scrapes)
	if restarts < 1 {
		t.Errorf("no stream restart with cause broker after a stall longer than --confirm-timeout:\n%s", long.routerLines())
	}
	if zeroes > 0 || lag < 10 {
		t.Errorf("the lag fell to 0 in %d of %d scrapes during the stall, or ended at %.1f s (want above 10 s)", zeroes, scrapes, lag)
	}
	p.Resume()
	waitMetric(t, addr, "lag and in-flight events back to 0 after the restart", 90*time.Second, func(s scrape) bool {
		return s.series["cdc_router_replication_lag_seconds"] == 0 && s.series["cdc_router_inflight_events"] == 0 &&
			s.series[`cdc_router_state{state="streaming"}`] == 1
	})
	c.waitFor(t, w.rows, 60*time.Second)
	if !regexp.MustCompile(`msg=progress .*published=0 .*lag=[1-9][0-9.]*s `).MatchString(r.Output()) {
		t.Errorf("no progress line showed the stall (published=0 with a lag):\n%s", tail(r.Output(), 30))
	}
	if !regexp.MustCompile(`msg=progress .*published=[1-9]\d* quarantined=0 rate_per_second=[0-9.]+ lag=\S+ lsn=\S+`).MatchString(r.Output()) {
		t.Errorf("no progress line with published, rate, lag and lsn:\n%s", tail(r.Output(), 30))
	}
}

// checkMetricsWithPromtool runs promtool check metrics over a real scrape: names, units, _total only on
// counters, help texts.
func checkMetricsWithPromtool(t *testing.T, promtool string, s scrape) {
	t.Helper()
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(s.text)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics on the router's /metrics: %v\n%s", err, out)
	}
}

// metricName finds the metric names in a PromQL expression: the router's, the process and Go collectors'.
var metricName = regexp.MustCompile(`\b(?:cdc_router|process|go)_[a-z0-9_]+\b`)

// checkReferencedMetrics: every metric the Grafana dashboard and the alert rules use is exported by the
// router (up, Prometheus's own, aside).
func checkReferencedMetrics(t *testing.T, s scrape) {
	t.Helper()
	root := testenv.ModuleRoot(t)
	exported := s.names()
	refs := map[string][]string{} // metric -> where
	dash, err := os.ReadFile(filepath.Join(root, "deploy", "grafana", "cdc-router.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, expr := range dashboardExprs(t, dash) {
		for _, m := range metricName.FindAllString(expr, -1) {
			refs[m] = append(refs[m], "dashboard")
		}
	}
	rules, err := os.ReadFile(filepath.Join(root, "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(rules), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		for _, m := range metricName.FindAllString(line, -1) {
			refs[m] = append(refs[m], "alerts.yml")
		}
	}
	if len(refs) < 15 {
		t.Fatalf("found only %d metric names in the dashboard and the rules: %v", len(refs), refs)
	}
	var missing []string
	for m, where := range refs {
		if !exported[m] {
			missing = append(missing, m+" ("+strings.Join(slices.Compact(where), ", ")+")")
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("the dashboard or the alert rules use metrics the router does not export:\n%s", strings.Join(missing, "\n"))
	}
}

// dashboardExprs are the PromQL expressions of a Grafana dashboard: every panel target's expr (rows
// included) and every query variable's query. The JSON must be valid.
func dashboardExprs(t *testing.T, data []byte) []string {
	t.Helper()
	type target struct {
		Expr string `json:"expr"`
	}
	type panel struct {
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
		Panels  []panel  `json:"panels"`
	}
	var d struct {
		Title      string  `json:"title"`
		UID        string  `json:"uid"`
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Type       string `json:"type"`
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("deploy/grafana/cdc-router.json is not valid JSON: %v", err)
	}
	if d.Title == "" || d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("the dashboard has no title, uid or panels")
	}
	var exprs []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr == "" {
					t.Errorf("panel %q has a target without expr", p.Title)
				}
				exprs = append(exprs, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			exprs = append(exprs, v.Definition)
		}
	}
	return exprs
}

// TestAlertRules checks deploy/prometheus/alerts.yml with promtool and runs its unit tests
// (alerts_test.yml: each alert fires when it should and not before).
func TestAlertRules(t *testing.T) {
	promtool := testenv.Promtool(t)
	dir := filepath.Join(testenv.ModuleRoot(t), "deploy", "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(dir, "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile(filepath.Join(testenv.ModuleRoot(t), "docs", "howto", "respond-to-alerts.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllStringSubmatch(string(rules), -1) {
		if !strings.Contains(string(tests), "alertname: "+m[1]) {
			t.Errorf("alert %s has no unit test in alerts_test.yml", m[1])
		}
		if !strings.Contains(string(ops), "### "+m[1]) {
			t.Errorf("alert %s has no runbook entry (### %s) in docs/howto/respond-to-alerts.md", m[1], m[1])
		}
	}
}

// TestReadyzFailsNearSlotInvalidation: with --min-safe-wal-bytes above the slot's safe_wal_size, /readyz
// answers 503 naming the cause, and the same router with the default threshold (a tenth of
// max_slot_wal_keep_size) is ready.
func TestReadyzFailsNearSlotInvalidation(t *testing.T) {
	e := newStreamEnv(t)
	e.exec(`ALTER SYSTEM SET max_slot_wal_keep_size = '1GB'`)
	e.exec(`SELECT pg_reload_conf()`)
	t.Cleanup(func() { e.exec(`ALTER SYSTEM RESET max_slot_wal_keep_size`); e.exec(`SELECT pg_reload_conf()`) })
	for _, tc := range []struct {
		flag  string
		ready bool
	}{{"0", true}, {"2147483648", false}} {
		addr := freeAddr(t)
		r := e.start("", "--http-addr", addr, "--min-safe-wal-bytes", tc.flag)
		r.waitLog("msg=streaming ", 30*time.Second)
		waitMetric(t, addr, "slot health read", 20*time.Second, func(s scrape) bool {
			return s.series["cdc_router_slot_safe_wal_size_bytes"] > 0
		})
		code, body := get(t, "http://"+addr+"/readyz")
		if tc.ready && code != 200 {
			t.Errorf("--min-safe-wal-bytes %s: /readyz %d %s, want 200", tc.flag, code, body)
		}
		if !tc.ready && (code != 503 || !strings.Contains(body, "safe_wal_size") || !strings.Contains(body, "from invalidation")) {
			t.Errorf("--min-safe-wal-bytes %s: /readyz %d %s, want 503 naming safe_wal_size", tc.flag, code, body)
		}
		r.signal(syscall.SIGTERM)
		r.wait(30 * time.Second)
	}
}

// TestBackfillMetrics: a backfill with --http-addr counts the rows the broker confirmed as
// cdc_router_events_published_total{source="backfill"} while it runs, next to the broker's metrics, and
// its scrape passes promtool check metrics.
func TestBackfillMetrics(t *testing.T) {
	promtool := testenv.Promtool(t)
	e := newStreamEnv(t)
	w := newWriter(t, e.pgURL, 10)
	w.prefill(200, "")
	addr := freeAddr(t)
	cmd := exec.Command(binary(t, e.tags), "backfill", "--where", "true", "--rate", "40", "--exchange", e.exchange,
		"--http-addr", addr)
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+e.pgURL, "CDC_ROUTER_AMQP_URL="+e.amqpURL)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	deadline := time.Now().Add(20 * time.Second)
	for {
		if code, body := getQuiet("http://" + addr + "/metrics"); code == 200 &&
			regexp.MustCompile(`cdc_router_events_published_total\{source="backfill"\} [1-9]`).MatchString(body) {
			if !strings.Contains(body, "cdc_router_confirm_round_trip_seconds_count") || !strings.Contains(body, "cdc_router_build_info") {
				t.Errorf("the backfill's scrape lacks the broker or build metrics:\n%s", body)
			}
			check := exec.Command(promtool, "check", "metrics")
			check.Stdin = strings.NewReader(body)
			if msg, err := check.CombinedOutput(); err != nil {
				t.Errorf("promtool check metrics on the backfill's /metrics: %v\n%s", err, msg)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the backfill's /metrics never counted a published row within 20 s; output:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	select {
	case err := <-done:
		done <- err
		if err != nil {
			t.Fatalf("backfill: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("backfill of 200 rows at 40 rows/s did not finish in 30 s:\n%s", out.String())
	}
}

// getQuiet is GET without failing the test on a connection error (the server may not listen yet).
func getQuiet(url string) (int, string) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
