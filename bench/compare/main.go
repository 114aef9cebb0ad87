// Command compare runs the same workload through three publishers in one run and prints one table:
// the bare publisher (amqp091-go with confirms and 1,000 in flight: the broker's ceiling), cdc-router
// (the real binary, against a throwaway PostgreSQL cluster) and a reference polling publisher (one
// worker, FOR UPDATE SKIP LOCKED LIMIT 100, UPDATE ... SET published_at), each in three modes: a
// backlog drain and two steady rates. It writes the plots as SVG. Run it with `make bench-compare`;
// docs/benchmarks.md explains the method and the figures.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

type config struct {
	events      int           // drain backlog
	steady      time.Duration // length of each steady run
	rates       []int
	runs        int
	writers     int
	size        int
	amqpURL     string
	plots       string // directory for the SVG plots; empty: none
	pprofDir    string // with it, the router is built with -tags pprof and profiled into it
	timeout     time.Duration
	routerBin   string
	bareHeaders bool
	pollHeaders bool     // the polling publisher sends the router's headers too (-poll-headers)
	brokerPID   int      // the RabbitMQ node's process whose CPU is measured (-broker-pid); 0: none
	routerFlags []string // extra flags for `cdc-router run` (-router-flags)
	routerEnv   []string // extra environment of the router process (-router-env)
	log         io.Writer

	// The extra modes (modes.go); 0 skips each.
	snapshotRows   int   // initial snapshot of this many rows
	snapshotPerAgg []int // rows per aggregate, one snapshot mode each
	backlog        int   // backlog of this many 1-row transactions
	bigTxn         int   // one transaction of this many rows
	hotBurst       int   // one transaction of this many rows of one aggregate, beside a trickle of others
	hotWindows     []int // --aggregate-window of the router, one hot-burst mode each

	modes        map[string]bool // -modes: drain, steady, quorum, far
	sweepWindows []int           // the fixed --window values of the quorum and far modes (sweep.go)
	farDelay     time.Duration   // the far mode's one-way delay
	farQuorum    bool            // the far mode's queue is a quorum queue nobody consumes (-far-queue quorum)
	scrapeEvery  time.Duration   // how often the router's /metrics is read; 0: never (no --http-addr)
	adaptiveFlag bool            // the router binary has --adaptive-window
}

// allModes are the values of -modes, in the order they run.
var allModes = []string{"drain", "steady", "quorum", "far"}

// parseModes reads -modes: names of allModes separated by commas, or "all".
func parseModes(s string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "all":
			for _, m := range allModes {
				out[m] = true
			}
		case slices.Contains(allModes, f):
			out[f] = true
		default:
			return nil, fmt.Errorf("-modes %q: want some of %s (or all), separated by commas", s, strings.Join(allModes, ", "))
		}
	}
	return out, nil
}

func main() {
	role := flag.String("role", "", "internal: bare or poll, run as a child process so that its CPU and RSS are its own")
	n := flag.Int("n", 0, "internal (bare): messages to publish")
	rate := flag.Int("rate", 0, "internal (bare): messages per second, 0: as fast as confirmed")
	exchange := flag.String("exchange", "", "internal: exchange to publish to")
	pgURL := flag.String("pg-url", "", "internal (poll): database with the outbox")

	var c config
	flag.IntVar(&c.events, "events", 50_000, "backlog drain: events inserted (1-row transactions) before the publisher starts")
	flag.DurationVar(&c.steady, "steady", 15*time.Second, "length of each steady-rate run")
	rates := flag.String("rates", "1000,5000", "steady rates, events per second, comma-separated; empty: the drain only")
	flag.BoolVar(&c.bareHeaders, "bare-headers", true, "the bare publisher (the ceiling) sends the router's 5 headers and 3 properties, as the router does; false: none (the drain also has a row of the bare publisher without them either way)")
	flag.BoolVar(&c.pollHeaders, "poll-headers", false, "the polling publisher sends the router's 5 headers and 3 properties too (the same messages as the router's); false: none, as issue 9 defined the reference")
	brokerPID := flag.Int("broker-pid", 0, "the process of the RabbitMQ node whose CPU per event is measured; 0: the machine's only beam.smp process, if there is exactly one; -1: none")
	flag.IntVar(&c.runs, "runs", 3, "runs of the whole suite; the table shows the median of each figure")
	flag.IntVar(&c.writers, "writers", 4, "load generator connections")
	flag.IntVar(&c.size, "size", 512, "message body bytes")
	flag.StringVar(&c.amqpURL, "amqp-url", envOr("CDC_ROUTER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ")
	flag.StringVar(&c.plots, "plots", "docs/bench", "directory to write the SVG plots to; empty: no plots")
	flag.StringVar(&c.pprofDir, "pprof-dir", "", "write CPU and allocation profiles of the router's drain and steady runs here")
	flag.DurationVar(&c.timeout, "timeout", 10*time.Minute, "longest wait for one run's events to reach the consumer")
	routerEnv := flag.String("router-env", "", "extra environment of the router process, space-separated NAME=value (e.g. \"GOMAXPROCS=1\")")
	routerFlags := flag.String("router-flags", "", "extra flags for `cdc-router run`, space-separated (e.g. \"--lanes 1 --window 2048\")")
	flag.IntVar(&c.snapshotRows, "snapshot-rows", 0, "initial snapshot mode: rows written before the slot exists (e.g. 1000000); 0: skip")
	perAgg := flag.String("snapshot-per-aggregate", "1,10", "snapshot mode: rows per aggregate, one snapshot mode per value, comma-separated")
	flag.IntVar(&c.backlog, "backlog", 0, "backlog mode: events (1-row transactions) written while the router is stopped (e.g. 1000000); 0: skip")
	flag.IntVar(&c.bigTxn, "big-txn", 0, "one-transaction mode: rows of one INSERT ... SELECT committed while the router streams (e.g. 100000); 0: skip")
	flag.IntVar(&c.hotBurst, "hot-burst", 0, "hot-aggregate mode: one transaction of this many rows of one aggregate (e.g. 20000), committed while 1-row transactions of other aggregates trickle in at 50/s; its row's latency is the trickle's; 0: skip")
	hotWindows := flag.String("hot-aggregate-windows", "1,64", "hot-aggregate mode: the router's --aggregate-window, one mode per value, comma-separated")
	modes := flag.String("modes", "drain,steady", "modes to run, comma-separated: drain, steady (the -rates), quorum (a quorum queue nobody consumes) and far (the broker behind a proxy adding -far-delay each way), or all; quorum and far run the bare publisher, the router with each fixed window of -sweep-windows and the router's default; the snapshot, backlog, one-transaction and hot-aggregate modes run when their own flags ask")
	sweepWindows := flag.String("sweep-windows", "32,128,512,2048", "quorum and far modes: the fixed --window values (per lane) the router's default is compared with, comma-separated")
	flag.DurationVar(&c.farDelay, "far-delay", time.Millisecond, "far mode: the delay the proxy adds to each direction (1ms: a 2 ms round trip)")
	farQueue := flag.String("far-queue", "classic", "far mode: classic (a classic queue with a consumer that keeps up, as in the drain) or quorum (a quorum queue nobody consumes, as in the quorum mode)")
	flag.DurationVar(&c.scrapeEvery, "scrape-interval", 100*time.Millisecond, "how often to read the router's in-flight limit and events from its /metrics (the router runs with --http-addr on a free local port); 0: never")
	flag.Parse()
	if v, err := parseModes(*modes); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	} else {
		c.modes = v
	}
	if v, err := parsePerAggregate(*sweepWindows); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", strings.Replace(err.Error(), "-snapshot-per-aggregate", "-sweep-windows", 1))
		os.Exit(2)
	} else {
		c.sweepWindows = v
	}
	switch *farQueue {
	case "classic":
	case "quorum":
		c.farQuorum = true
	default:
		fmt.Fprintf(os.Stderr, "compare: -far-queue %q: want classic or quorum\n", *farQueue)
		os.Exit(2)
	}
	if c.farDelay <= 0 && c.modes["far"] {
		fmt.Fprintln(os.Stderr, "compare: -far-delay must be positive for -modes far")
		os.Exit(2)
	}
	c.routerFlags = strings.Fields(*routerFlags)
	c.routerEnv = strings.Fields(*routerEnv)
	if v, err := parsePerAggregate(*perAgg); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(2)
	} else {
		c.snapshotPerAgg = v
	}
	if v, err := parsePerAggregate(*hotWindows); err != nil {
		fmt.Fprintln(os.Stderr, "compare:", strings.Replace(err.Error(), "-snapshot-per-aggregate", "-hot-aggregate-windows", 1))
		os.Exit(2)
	} else {
		c.hotWindows = v
	}

	var err error
	switch *role {
	case "bare":
		err = runBare(c.amqpURL, *exchange, *n, *rate, c.size, c.bareHeaders)
	case "poll":
		err = runPoll(*pgURL, c.amqpURL, *exchange, c.pollHeaders)
	case "":
		for _, r := range strings.Split(*rates, ",") {
			if strings.TrimSpace(r) == "" && strings.TrimSpace(*rates) == "" {
				break // drain only
			}
			v, perr := strconv.Atoi(strings.TrimSpace(r))
			if perr != nil || v <= 0 {
				fmt.Fprintf(os.Stderr, "compare: -rates %q: want positive integers separated by commas\n", *rates)
				os.Exit(2)
			}
			c.rates = append(c.rates, v)
		}
		c.log = os.Stderr
		var why string
		if c.brokerPID, why = brokerProcess(*brokerPID, c.amqpURL); why != "" {
			if *brokerPID > 0 {
				fmt.Fprintln(os.Stderr, "compare:", why)
				os.Exit(2)
			}
			fmt.Fprintln(c.log, "compare:", why)
		}
		var table string
		table, err = compare(c)
		fmt.Print(table)
	default:
		err = fmt.Errorf("unknown -role %q", *role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "compare:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// result is one publisher's figures in one mode of one run.
type result struct {
	mode, system string
	events       int
	rate         float64       // delivered events/s
	offered      float64       // commits/s the load generator reached (steady modes)
	lat          []int64       // sorted, ns
	recv         []int64       // arrival times, unix ns
	cpuPerEvent  float64       // µs, publisher process
	pgPerEvent   float64       // µs, whole cluster; NaN-free: -1 when not applicable
	mqPerEvent   float64       // µs, the RabbitMQ node's process (-broker-pid); -1 when not measured
	rss          float64       // MiB
	limits       []limitSample // the router's in-flight limit and events over the run (scrape.go)
	start        int64         // steady modes: the first insert, unix ns
	timeline     []latBin      // steady modes: latency by time of arrival
}

const (
	bare          = "bare publisher"
	bareNoHeaders = "bare publisher, no headers" // the drain's second ceiling: the broker's work without the router's headers
	router        = "cdc-router"
	poll          = "polling publisher"
	inserts       = "inserts only"
)

var systems = []string{bare, router, poll}

// systemsOf lists the rows of a mode: at a steady rate also the load generator alone, whose PostgreSQL
// CPU is the part of the publishers' figure that the inserts cost.
func systemsOf(rate int) []string {
	if rate == 0 {
		return []string{bare, bareNoHeaders, router, poll}
	}
	return append(systems[:len(systems):len(systems)], inserts)
}

func modeName(rate int) string {
	if rate == 0 {
		return "drain"
	}
	return fmt.Sprintf("steady %d/s", rate)
}

// compare runs everything and returns the table.
func compare(c config) (string, error) {
	_, err := moduleRoot() // testenv.Build builds by import path: inside the module
	if err != nil {
		return "", err
	}
	tags := ""
	if c.pprofDir != "" {
		tags = "pprof"
	}
	// Built without -race (the figures are a user's), into testenv's build folder.
	if c.routerBin, err = (testenv.Build{Pkg: testenv.RouterPackage, Tags: tags}).Path(); err != nil {
		return "", err
	}
	defer testenv.RemoveBuilds()
	help, _ := exec.Command(c.routerBin, "run", "-h").CombinedOutput()
	c.adaptiveFlag = strings.Contains(string(help), "-adaptive-window")
	if conn, err := amqp.Dial(c.amqpURL); err != nil {
		return "", fmt.Errorf("RabbitMQ is not reachable (%v): start it, e.g. with `make services`", err)
	} else {
		conn.Close()
	}
	pg, err := testenv.StartPostgres()
	if err != nil {
		return "", err
	}
	defer pg.Close()
	// Interrupted: stop the cluster (its children die with the benchmark) rather than leave it running.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	go func() {
		if _, ok := <-sigs; ok {
			fmt.Fprintln(c.log, "\ninterrupted: stopping the PostgreSQL cluster")
			pg.Close()
			testenv.RemoveBuilds()
			os.Exit(130)
		}
	}()
	pm, err := testenv.PostmasterPID(pg.Port)
	if err != nil {
		return "", err
	}
	var modes []int
	if c.modes["drain"] {
		modes = append(modes, 0)
	}
	if c.modes["steady"] {
		modes = append(modes, c.rates...)
	}
	all := map[string][]result{} // mode/system -> one per run
	var last []result
	var loads []runLoad
	for run := 1; run <= c.runs; run++ {
		last = last[:0]
		loads = append(loads, runLoad{start: loadAverage()})
		fmt.Fprintf(c.log, "run %d/%d: load average %s\n", run, c.runs, loads[run-1].start)
		for _, rate := range modes {
			for _, sys := range systemsOf(rate) {
				fmt.Fprintf(c.log, "run %d/%d: %s, %s ...", run, c.runs, modeName(rate), sys)
				r, err := runOne(c, pg, pm, sys, rate, run)
				if err != nil {
					fmt.Fprintln(c.log)
					return "", err
				}
				if sys == inserts {
					fmt.Fprintf(c.log, " offered %.0f/s, PostgreSQL CPU %.1f µs/event\n", r.offered, r.pgPerEvent)
				} else {
					fmt.Fprintf(c.log, " %.0f events/s (offered %.0f/s), p50 %s ms, p99 %s ms, publisher CPU %.1f µs/event, PostgreSQL CPU %.1f µs/event\n",
						r.rate, r.offered, ms(pct(r.lat, 0.5)), ms(pct(r.lat, 0.99)), r.cpuPerEvent, r.pgPerEvent)
				}
				key := r.mode + "/" + sys
				all[key] = append(all[key], r)
				last = append(last, r)
			}
		}
		if err := runExtraModes(c, pg, pm, run, all); err != nil {
			return "", err
		}
		if err := runSweepModes(c, pg, pm, run, all); err != nil {
			return "", err
		}
		for _, m := range sweepModes(c) {
			for _, sys := range sweepSystems(c.sweepWindows) {
				if rs := all[m.name()+"/"+sys]; len(rs) > 0 {
					last = append(last, rs[len(rs)-1])
				}
			}
		}
		loads[run-1].end = loadAverage()
		fmt.Fprintf(c.log, "run %d/%d: load average %s at the end\n", run, c.runs, loads[run-1].end)
	}
	if c.plots != "" {
		if err := writePlots(c.plots, last, c); err != nil {
			return "", err
		}
	}
	return table(c, modes, all, loads), nil
}

// brokerProcess is the pid of the RabbitMQ node whose CPU is measured: flagPID when positive, none when
// negative, and with 0 the machine's only beam.smp process, when the broker is on this machine (amqpURL's
// host is a loopback address). With 0 it also says why nothing is measured, when that is so.
func brokerProcess(flagPID int, amqpURL string) (int, string) {
	switch {
	case flagPID < 0:
		return 0, ""
	case flagPID > 0:
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/stat", flagPID)); err != nil {
			return 0, fmt.Sprintf("-broker-pid %d: no such process on this machine: name the RabbitMQ node's beam.smp process, or -1 for none", flagPID)
		}
		return flagPID, ""
	}
	if u, err := url.Parse(amqpURL); err != nil || !isLoopback(u.Hostname()) {
		return 0, "RabbitMQ is not on this machine's loopback address: its CPU is not measured (-broker-pid names its process if it runs here)"
	}
	dirs, _ := os.ReadDir("/proc")
	found := 0
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if comm, err := os.ReadFile(filepath.Join("/proc", d.Name(), "comm")); err == nil && strings.TrimSpace(string(comm)) == "beam.smp" {
			if found != 0 {
				return 0, "more than one beam.smp process on this machine: RabbitMQ's CPU is not measured (-broker-pid names one)"
			}
			found = pid
		}
	}
	if found == 0 {
		return 0, "no beam.smp process on this machine: RabbitMQ's CPU is not measured"
	}
	return found, ""
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// brokerCPU is the CPU time the RabbitMQ node used so far, in seconds; 0 when it is not measured.
func (c config) brokerCPU() float64 {
	if c.brokerPID == 0 {
		return 0
	}
	return testenv.CPUSeconds(c.brokerPID)
}

// brokerPerEvent is the node's CPU per event since mq0, in µs; -1 when it is not measured. It is the
// whole node's: whatever else the broker serves meanwhile counts too.
func (c config) brokerPerEvent(mq0 float64, events int) float64 {
	now := c.brokerCPU()
	if c.brokerPID == 0 || now <= 0 || now < mq0 { // not measured, or the node stopped or restarted meanwhile
		return -1
	}
	return (now - mq0) * 1e6 / float64(events)
}

func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" || strings.TrimSpace(string(out)) == os.DevNull {
		return "", fmt.Errorf("run compare inside the cdc-router module (go env GOMOD: %v)", err)
	}
	return filepath.Dir(strings.TrimSpace(string(out))), nil
}

// runOne runs one publisher in one mode of the drain and the steady rates.
func runOne(c config, pg *testenv.Postgres, pm int, sys string, rate, run int) (result, error) {
	name := fmt.Sprintf("bench_%s_%d_%d", map[string]string{bare: "bare", bareNoHeaders: "barenh", router: "router", poll: "poll", inserts: "inserts"}[sys], rate, run)
	return runJob(c, pg, pm, job{mode: modeName(rate), sys: sys, kind: sys, rate: rate, run: run, name: name, profDir: profileDir(c, rate, run)})
}

// job is one publisher's run in one mode.
type job struct {
	mode, sys  string   // the table's mode and publisher
	kind       string   // which publisher: bare, bareNoHeaders, router, poll or inserts
	rate       int      // events/s; 0: a backlog drain
	run        int      // 1..c.runs
	name       string   // of its database, slot, exchange and queue
	profDir    string   // the router's profiles (-pprof-dir); "": none
	queueType  string   // the queue's x-queue-type; "": the broker's default (classic)
	noConsumer bool     // nobody consumes: the queue's depth counts the messages (the rate only; no latency)
	pubURL     string   // the publisher's AMQP URL (a delaying proxy's); "": c.amqpURL
	routerArgs []string // flags of `cdc-router run` after -router-flags (so they win)
}

// runJob runs one publisher in one mode on a database, exchange and queue of its own.
func runJob(c config, pg *testenv.Postgres, pm int, j job) (res result, err error) {
	ctx := context.Background()
	sys, rate, name := j.kind, j.rate, j.name
	// The broker is shared: the pid keeps two runs (a test and make bench-compare) apart.
	exchange, queue := fmt.Sprintf("x_%s_%d", name, os.Getpid()), fmt.Sprintf("q_%s_%d", name, os.Getpid())
	total := c.events
	if rate > 0 {
		total = int(float64(rate) * c.steady.Seconds())
	}
	res = result{mode: j.mode, system: j.sys, events: total, pgPerEvent: -1, mqPerEvent: -1}
	if sys == inserts {
		return insertsOnly(c, pg, pm, res, name, rate)
	}
	pc := c // the publisher's configuration: its broker may be behind a proxy
	if j.pubURL != "" {
		pc.amqpURL = j.pubURL
	}
	pc.routerFlags = append(append([]string(nil), c.routerFlags...), j.routerArgs...)

	if err := declare(c.amqpURL, exchange, queue, j.queueType); err != nil {
		return res, err
	}
	defer deleteTopology(c.amqpURL, exchange, queue)
	var cons *consumer
	var depth *depthWatch
	if j.noConsumer {
		if depth, err = watchDepth(c.amqpURL, queue); err != nil {
			return res, err
		}
		defer depth.close()
	} else {
		if cons, err = consume(c.amqpURL, queue, total); err != nil {
			return res, err
		}
		defer cons.conn.Close()
	}

	var dbURL string
	if !isBare(sys) {
		if dbURL, err = createDatabase(ctx, pg, name, sys == poll); err != nil {
			return res, err
		}
		defer dropDatabase(pg, name)
	}

	var proc *child
	var cpu0, pg0, mq0 float64
	switch sys {
	case bare, bareNoHeaders:
		mq0 = c.brokerCPU()
		if proc, err = startChild(pc, "-role", "bare", "-exchange", exchange, "-n", strconv.Itoa(total), "-rate", strconv.Itoa(rate),
			"-bare-headers="+strconv.FormatBool(c.bareHeaders && sys == bare)); err != nil {
			return res, err
		}
	case router:
		if proc, err = startRouter(pc, dbURL, name, exchange, j.profDir); err != nil {
			return res, err
		}
		if rate == 0 {
			// The slot exists now; stop the router, write the backlog, and start it again.
			if err := proc.stop(); err != nil {
				return res, err
			}
			if _, err := load(ctx, dbURL, total, 0, c.writers, c.size); err != nil {
				return res, err
			}
			pg0, mq0 = testenv.ClusterCPU(pm), c.brokerCPU()
			if proc, err = startRouter(pc, dbURL, name, exchange, j.profDir); err != nil {
				return res, err
			}
		}
		proc.profile(j.profDir)
	case poll:
		if rate == 0 {
			if _, err := load(ctx, dbURL, total, 0, c.writers, c.size); err != nil {
				return res, err
			}
		}
		pg0, mq0 = testenv.ClusterCPU(pm), c.brokerCPU()
		if proc, err = startChild(pc, "-role", "poll", "-exchange", exchange, "-pg-url", dbURL, "-poll-headers="+strconv.FormatBool(c.pollHeaders)); err != nil {
			return res, err
		}
	}
	defer proc.stop()
	scr := scrape(proc.httpAddr, c.scrapeEvery)
	defer func() { scr.end() }()
	if rate > 0 {
		cpu0, pg0, mq0 = testenv.CPUSeconds(proc.pid()), testenv.ClusterCPU(pm), c.brokerCPU()
		if !isBare(sys) {
			took, err := load(ctx, dbURL, total, rate, c.writers, c.size)
			if err != nil {
				return res, err
			}
			res.offered = float64(total) / took.Seconds()
		}
	}
	if depth != nil {
		err = depth.wait(total, c.timeout, res.mode+", "+j.sys)
	} else {
		err = cons.wait(total, c.timeout, res.mode+", "+j.sys)
	}
	if err != nil {
		return res, errors.Join(err, proc.failure())
	}
	cpu1 := testenv.CPUSeconds(proc.pid())
	res.mqPerEvent = c.brokerPerEvent(mq0, total)
	if !isBare(sys) {
		res.pgPerEvent = (testenv.ClusterCPU(pm) - pg0) * 1e6 / float64(total)
	}
	res.cpuPerEvent = (cpu1 - cpu0) * 1e6 / float64(total)
	res.rss = testenv.PeakRSS(proc.pid())
	res.limits = scr.end()
	scr = nil
	proc.endProfile()
	if err := proc.stop(); err != nil {
		return res, err
	}
	if depth != nil {
		// No deliveries: from the first count above zero to the count of all of them.
		res.rate = depth.rate(total)
		return res, nil
	}
	res.recv, res.lat = cons.results()
	// Drain: from the first delivery to the last (the same for every publisher, whatever its startup
	// costs). Steady: from the first insert to the last delivery.
	first := res.recv[0]
	if rate > 0 {
		for i, r := range res.recv {
			first = min(first, r-cons.lat[i])
		}
		res.start = first
		res.timeline = latencyTimeline(res.recv, cons.lat, first, 250*time.Millisecond)
	}
	res.rate = float64(total) / (float64(res.recv[len(res.recv)-1]-first) / 1e9)
	return res, nil
}

// insertsOnly runs the load generator at rate with no publisher and measures what PostgreSQL spends.
func insertsOnly(c config, pg *testenv.Postgres, pm int, res result, name string, rate int) (result, error) {
	ctx := context.Background()
	dbURL, err := createDatabase(ctx, pg, name, false)
	if err != nil {
		return res, err
	}
	defer dropDatabase(pg, name)
	pg0 := testenv.ClusterCPU(pm)
	took, err := load(ctx, dbURL, res.events, rate, c.writers, c.size)
	if err != nil {
		return res, err
	}
	res.pgPerEvent = (testenv.ClusterCPU(pm) - pg0) * 1e6 / float64(res.events)
	res.offered = float64(res.events) / took.Seconds()
	return res, nil
}

func profileDir(c config, rate, run int) string {
	if c.pprofDir == "" || run != 1 {
		return ""
	}
	return filepath.Join(c.pprofDir, strings.ReplaceAll(strings.ReplaceAll(modeName(rate), " ", "-"), "/", "per"))
}

// declare declares the exchange as the router does and a durable queue bound to it, of queueType ("":
// the broker's default, a classic queue).
func declare(url, exchange, queue, queueType string) error {
	conn, err := amqp.Dial(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	// As the router declares its exchange (with an alternate exchange for unroutable events).
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, amqp.Table{"alternate-exchange": exchange + ".unroutable"}); err != nil {
		return fmt.Errorf("declare exchange %s: %w", exchange, err)
	}
	var args amqp.Table
	if queueType != "" {
		args = amqp.Table{"x-queue-type": queueType}
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return fmt.Errorf("declare queue %s: %w", queue, err)
	}
	return ch.QueueBind(queue, "#", exchange, false, nil)
}

func deleteTopology(url, exchange, queue string) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	ch.QueueDelete(queue, false, false, false)
	ch.QueueDelete(exchange+".unroutable", false, false, false)
	ch.ExchangeDelete(exchange, false, false)
	ch.ExchangeDelete(exchange+".unroutable", false, false)
}

// createDatabase creates a database with the router's schema and outbox (migrations.Apply); for the
// polling publisher also the published_at column it needs and the partial index it polls with.
func createDatabase(ctx context.Context, pg *testenv.Postgres, name string, polling bool) (string, error) {
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return "", err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", err
	}
	url := pg.URL(name)
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		return "", err
	}
	defer db.Close(ctx)
	if err := migrations.Apply(ctx, db, migrations.Config{}); err != nil {
		return "", err
	}
	if polling {
		if _, err := db.Exec(ctx, `ALTER TABLE outbox ADD COLUMN published_at timestamptz;
			CREATE INDEX outbox_unpublished ON outbox (occurred_at) WHERE published_at IS NULL`); err != nil {
			return "", err
		}
	}
	return url, nil
}

func dropDatabase(pg *testenv.Postgres, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, pg.URL("postgres"))
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	admin.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name)
	admin.Exec(ctx, "DROP DATABASE "+name+" WITH (FORCE)")
}

// child is a publisher process: the router, or this program in the bare or poll role.
type child struct {
	*testenv.Process
	profDir  string
	stopped  bool
	httpAddr string // the router's --http-addr, which the benchmark scrapes; "": none
}

func start(cmd *exec.Cmd) (*child, error) {
	// A publisher must not outlive the benchmark (interrupted, or killed by a test timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p, err := testenv.Start(cmd)
	if err != nil {
		return nil, err
	}
	return &child{Process: p}, nil
}

func startChild(c config, args ...string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return start(exec.Command(self, append(args, "-amqp-url", c.amqpURL, "-size", strconv.Itoa(c.size))...))
}

// startRouter starts cdc-router and waits until it streams. With profDir, a router built with -tags pprof
// profiles into it between child.profile and child.endProfile.
func startRouter(c config, dbURL, slot, exchange, profDir string) (*child, error) {
	return startRouterUntil(c, dbURL, slot, exchange, profDir, "msg=streaming ")
}

// startRouterUntil starts cdc-router (run, with args and -router-flags) and waits until its log has a line
// with marker: "msg=streaming " for startRouter; an initial snapshot logs its start before it streams.
func startRouterUntil(c config, dbURL, slot, exchange, profDir, marker string, args ...string) (*child, error) {
	args = append(append([]string{"run", "--log-level", "info"}, args...), c.routerFlags...)
	httpAddr := ""
	if c.scrapeEvery > 0 && !hasFlag(c.routerFlags, "http-addr") {
		var err error
		if httpAddr, err = freeAddr(); err != nil {
			return nil, err
		}
		args = append(args, "--http-addr", httpAddr)
	}
	cmd := exec.Command(c.routerBin, args...)
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+dbURL, "CDC_ROUTER_AMQP_URL="+c.amqpURL,
		"CDC_ROUTER_SLOT="+slot, "CDC_ROUTER_EXCHANGE="+exchange)
	cmd.Env = append(cmd.Env, c.routerEnv...)
	if profDir != "" {
		cmd.Env = append(cmd.Env, "CDC_ROUTER_PROFILE_DIR="+profDir)
	}
	p, err := start(cmd)
	if err != nil {
		return nil, err
	}
	p.httpAddr = httpAddr
	deadline := time.Now().Add(c.timeout)
	for !strings.Contains(p.Output(), marker) {
		select {
		case <-p.Done:
			return nil, fmt.Errorf("cdc-router exited before logging %q:\n%s", marker, tail(p.Output()))
		default:
		}
		if time.Now().After(deadline) {
			p.stop()
			return nil, fmt.Errorf("cdc-router did not log %q within %v:\n%s", marker, c.timeout, tail(p.Output()))
		}
		time.Sleep(2 * time.Millisecond)
	}
	return p, nil
}

func (p *child) pid() int { return p.Cmd.Process.Pid }

// hasFlag reports whether args set the flag name (-name or --name, with or without =value).
func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

// profile starts the router's CPU profile (a router built with -tags pprof; see profile_pprof.go).
func (p *child) profile(dir string) {
	if dir == "" {
		return
	}
	os.RemoveAll(dir)
	p.profDir = dir
	p.Cmd.Process.Signal(syscall.SIGUSR1)
}

// endProfile stops it and waits until the profiles are written.
func (p *child) endProfile() {
	if p.profDir == "" {
		return
	}
	p.Cmd.Process.Signal(syscall.SIGUSR2)
	for i := 0; i < 300; i++ {
		if _, err := os.Stat(filepath.Join(p.profDir, "done")); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop ends the process with SIGTERM and fails if it exited with an error before.
func (p *child) stop() error {
	if p == nil || p.stopped {
		return nil
	}
	p.stopped = true
	select {
	case <-p.Done:
		return p.failure()
	default:
	}
	p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.Done:
	case <-time.After(30 * time.Second):
		p.Cmd.Process.Kill()
		<-p.Done
	}
	return nil
}

// failure describes an early exit, with the end of the process's output.
func (p *child) failure() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.Done:
		return fmt.Errorf("%s exited (%v):\n%s", filepath.Base(p.Cmd.Path), p.Cmd.ProcessState, tail(p.Output()))
	default:
		return nil
	}
}

func tail(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-30):], "\n")
}

// isBare reports whether sys is one of the bare publisher's rows (no database, no PostgreSQL CPU).
func isBare(sys string) bool { return sys == bare || sys == bareNoHeaders }
