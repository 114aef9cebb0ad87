package main

// The modes of issue 9's snapshot and memory targets, beside the drain and the steady rates: an initial
// snapshot of rows already in the table (-snapshot-rows), a large backlog (-backlog) and one large
// transaction (-big-txn). Each runs the bare publisher over the same number of messages (the ceiling of
// that mode) and cdc-router, and reports them in the same table.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// extraMode is one of the modes beyond the drain and the steady rates.
type extraMode struct {
	kind   string // "snapshot", "backlog" or "big txn"
	n      int    // rows or events
	perAgg int    // snapshot: rows per aggregate (versions 1..perAgg of each aggregate)
	window int    // hot burst: the router's --aggregate-window
}

func (m extraMode) name() string {
	switch m.kind {
	case "snapshot":
		if m.perAgg == 1 {
			return "snapshot, 1 row/aggregate"
		}
		return fmt.Sprintf("snapshot, %d rows/aggregate", m.perAgg)
	case "big txn":
		return "one transaction"
	case "hot burst":
		return fmt.Sprintf("hot aggregate, --aggregate-window %d", m.window)
	}
	return m.kind
}

// extraModes are the modes the flags ask for, in the order they run.
func extraModes(c config) []extraMode {
	var ms []extraMode
	if c.snapshotRows > 0 {
		for _, k := range c.snapshotPerAgg {
			ms = append(ms, extraMode{kind: "snapshot", n: c.snapshotRows, perAgg: k})
		}
	}
	if c.backlog > 0 {
		ms = append(ms, extraMode{kind: "backlog", n: c.backlog, perAgg: 1})
	}
	if c.bigTxn > 0 {
		ms = append(ms, extraMode{kind: "big txn", n: c.bigTxn, perAgg: 1})
	}
	if c.hotBurst > 0 {
		for _, w := range c.hotWindows {
			ms = append(ms, extraMode{kind: "hot burst", n: c.hotBurst, perAgg: c.hotBurst, window: w})
		}
	}
	return ms
}

// parsePerAggregate reads -snapshot-per-aggregate: positive integers separated by commas.
func parsePerAggregate(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("-snapshot-per-aggregate %q: want positive integers separated by commas", s)
		}
		out = append(out, v)
	}
	return out, nil
}

// runExtraModes runs the bare publisher and the router in each extra mode of one run. The bare publisher
// runs once per number of messages in a run: modes of the same size share its row.
func runExtraModes(c config, pg *testenv.Postgres, pm, run int, all map[string][]result) error {
	bares := map[int]result{}
	for i, m := range extraModes(c) {
		b, ok := bares[m.n]
		if !ok {
			fmt.Fprintf(c.log, "run %d/%d: %s, %s ...", run, c.runs, m.name(), bare)
			cc := c
			cc.events = m.n
			var err error
			if b, err = runOne(cc, pg, pm, bare, 0, run); err != nil {
				fmt.Fprintln(c.log)
				return err
			}
			fmt.Fprintf(c.log, " %.0f events/s, publisher CPU %.1f µs/event, peak RSS %.1f MiB\n", b.rate, b.cpuPerEvent, b.rss)
			bares[m.n] = b
		}
		b.mode = m.name()
		all[m.name()+"/"+bare] = append(all[m.name()+"/"+bare], b)

		fmt.Fprintf(c.log, "run %d/%d: %s, %s ...", run, c.runs, m.name(), router)
		r, err := runRouterExtra(c, pg, pm, m, fmt.Sprintf("bench_extra%d_%d", i, run), extraProfileDir(c, m, run))
		if err != nil {
			fmt.Fprintln(c.log)
			return err
		}
		fmt.Fprintf(c.log, " %.0f events/s (%.2f of the bare publisher), router CPU %.1f µs/event, PostgreSQL CPU %.1f µs/event, peak RSS %.1f MiB\n",
			r.rate, r.rate/b.rate, r.cpuPerEvent, r.pgPerEvent, r.rss)
		all[m.name()+"/"+router] = append(all[m.name()+"/"+router], r)
	}
	return nil
}

func extraProfileDir(c config, m extraMode, run int) string {
	if c.pprofDir == "" || run != 1 {
		return ""
	}
	slug := strings.NewReplacer(", ", "-", " ", "-", "/", "per").Replace(m.name())
	return filepath.Join(c.pprofDir, slug)
}

// runRouterExtra runs cdc-router in one extra mode on a database, exchange and queue of its own.
//
//   - snapshot: the rows are written before the slot exists; the router then creates the slot with
//     --snapshot initial and publishes them from the slot's snapshot. The window runs from the slot's
//     creation (the router's log line "created replication slot with a snapshot", which the row count and
//     the page queries follow) to the last delivery.
//   - backlog: as the drain: the slot is created, the router stopped, the backlog written in 1-row
//     transactions, the router started again; the window runs from the first delivery to the last.
//   - big txn: the router streams; one INSERT ... SELECT generate_series of n rows commits in one
//     transaction; the window runs from the commit to the last delivery.
//   - hot burst: the router streams; the trickle starts and the burst commits (hotBurst); the window of the
//     rate runs from the burst's commit to its last delivery.
//
// Router CPU is counted from the process's start (snapshot, backlog) or from just before the INSERT (big
// txn) or the trickle (hot burst); PostgreSQL's and RabbitMQ's over the same window; peak RSS is the
// router's VmHWM.
func runRouterExtra(c config, pg *testenv.Postgres, pm int, m extraMode, name, profDir string) (res result, err error) {
	ctx := context.Background()
	exchange, queue := fmt.Sprintf("x_%s_%d", name, os.Getpid()), fmt.Sprintf("q_%s_%d", name, os.Getpid())
	res = result{mode: m.name(), system: router, events: m.n, pgPerEvent: -1, mqPerEvent: -1}
	if err := declare(c.amqpURL, exchange, queue, ""); err != nil {
		return res, err
	}
	defer deleteTopology(c.amqpURL, exchange, queue)
	cons, err := consume(c.amqpURL, queue, m.n)
	if err != nil {
		return res, err
	}
	defer cons.conn.Close()
	dbURL, err := createDatabase(ctx, pg, name, false)
	if err != nil {
		return res, err
	}
	defer dropDatabase(pg, name)

	var proc *child
	var cpu0, pg0, mq0 float64
	var start int64 // unix ns: the window's start; 0: the first delivery
	switch m.kind {
	case "snapshot":
		if err := writeRows(ctx, dbURL, m.n, m.perAgg, c.size, 100_000, true); err != nil {
			return res, err
		}
		pg0, mq0 = testenv.ClusterCPU(pm), c.brokerCPU()
		const created = `msg="created replication slot with a snapshot"`
		if proc, err = startRouterUntil(c, dbURL, name, exchange, profDir, created, "--snapshot", "initial"); err != nil {
			return res, err
		}
		start = logTime(proc.Output(), created)
	case "backlog":
		if proc, err = startRouter(c, dbURL, name, exchange, profDir); err != nil {
			return res, err
		}
		if err := proc.stop(); err != nil {
			return res, err
		}
		if err := writeBacklog(ctx, dbURL, m.n, c.writers, c.size); err != nil {
			return res, err
		}
		pg0, mq0 = testenv.ClusterCPU(pm), c.brokerCPU()
		if proc, err = startRouter(c, dbURL, name, exchange, profDir); err != nil {
			return res, err
		}
	case "big txn":
		if proc, err = startRouter(c, dbURL, name, exchange, profDir); err != nil {
			return res, err
		}
	case "hot burst":
		if proc, err = startRouterUntil(c, dbURL, name, exchange, profDir, "msg=streaming ", "--aggregate-window", strconv.Itoa(m.window)); err != nil {
			return res, err
		}
	}
	defer proc.stop()
	scr := scrape(proc.httpAddr, c.scrapeEvery)
	defer func() { scr.end() }()
	proc.profile(profDir)
	if m.kind == "big txn" {
		cpu0, pg0, mq0 = testenv.CPUSeconds(proc.pid()), testenv.ClusterCPU(pm), c.brokerCPU()
		if err := writeRows(ctx, dbURL, m.n, 1, c.size, m.n, false); err != nil {
			return res, err
		}
		start = time.Now().UnixNano()
	}
	trickled := 0
	if m.kind == "hot burst" {
		cpu0, pg0, mq0 = testenv.CPUSeconds(proc.pid()), testenv.ClusterCPU(pm), c.brokerCPU()
		if trickled, start, err = hotBurst(ctx, c, dbURL, cons, m, proc); err != nil {
			return res, err
		}
	}
	if err := cons.wait(m.n+trickled, c.timeout, m.name()+", "+router); err != nil {
		return res, fmt.Errorf("%w\n%v", err, proc.failure())
	}
	res.cpuPerEvent = (testenv.CPUSeconds(proc.pid()) - cpu0) * 1e6 / float64(m.n)
	res.pgPerEvent = (testenv.ClusterCPU(pm) - pg0) * 1e6 / float64(m.n)
	res.mqPerEvent = c.brokerPerEvent(mq0, m.n)
	res.rss = testenv.PeakRSS(proc.pid())
	res.limits, scr = scr.end(), nil
	proc.endProfile()
	if m.kind == "snapshot" {
		// The router really snapshotted: it counted the n rows in the slot's snapshot, and it logs the end
		// (after the last confirm, so possibly just after the consumer counted the last delivery).
		if line := logLine(proc.Output(), `msg="initial snapshot"`); !strings.Contains(line, fmt.Sprintf(" rows_total=%d ", m.n)) {
			return res, fmt.Errorf("%s: the router did not start an initial snapshot of %d rows; its log:\n%s", m.name(), m.n, tail(proc.Output()))
		}
		for i := 0; i < 500 && logLine(proc.Output(), `msg="snapshot finished"`) == ""; i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if line := logLine(proc.Output(), `msg="snapshot finished"`); line != "" {
			fmt.Fprintf(c.log, " [router: %s]", strings.TrimSpace(line[strings.Index(line, "msg="):]))
		}
	}
	if err := proc.stop(); err != nil {
		return res, err
	}
	res.recv, res.lat = cons.results()
	if m.kind == "hot burst" {
		var last int64
		res.lat, last = cons.trickle()
		res.rate = float64(m.n) / (float64(last-start) / 1e9)
		fmt.Fprintf(c.log, " [%d trickle events, p99 %s ms]", len(res.lat), ms(pct(res.lat, 0.99)))
		return res, nil
	}
	if start == 0 {
		start = res.recv[0]
	} else {
		fmt.Fprintf(c.log, " [first delivery %.0f ms after the start of the window]", float64(res.recv[0]-start)/1e6)
	}
	res.rate = float64(m.n) / (float64(res.recv[len(res.recv)-1]-start) / 1e9)
	return res, nil
}

// hotBurst runs the hot-aggregate mode on a streaming router: 1-row transactions of other aggregates
// (aggregate_type trickle, one aggregate each) at 50 per second from half a second before the burst to a
// second after it has arrived; the burst, n rows of one aggregate in one transaction. It returns how many
// trickle events were written and when the burst committed (unix ns).
func hotBurst(ctx context.Context, c config, dbURL string, cons *consumer, m extraMode, proc *child) (int, int64, error) {
	db, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, 0, fmt.Errorf("hot burst: trickle: %w", err)
	}
	defer db.Close(context.Background())
	stop := make(chan struct{})
	done := make(chan error, 1)
	written := 0
	go func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- nil
				return
			case <-tick.C:
			}
			if _, err := db.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
				VALUES (gen_random_uuid(), 'trickle', $1::text, 1, 'created', $2::jsonb)`, strconv.Itoa(written), payload(c.size, time.Now())); err != nil {
				done <- fmt.Errorf("hot burst: trickle: %w", err)
				return
			}
			written++
		}
	}()
	time.Sleep(500 * time.Millisecond)
	err = writeRows(ctx, dbURL, m.n, m.n, c.size, m.n, false)
	start := time.Now().UnixNano()
	if err == nil {
		if err = cons.waitOthers(m.n, c.timeout, m.name()+", "+router); err != nil {
			err = fmt.Errorf("%w\nthe router's log:\n%s", err, tail(proc.Output()))
		}
	}
	if err == nil {
		time.Sleep(time.Second)
	}
	close(stop)
	if terr := <-done; err == nil {
		err = terr
	}
	return written, start, err
}

// logLine is the first line of the router's log containing marker, or "".
func logLine(log, marker string) string {
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, marker) {
			return line
		}
	}
	return ""
}

// logTime is the time= of the first log line containing marker, in unix ns; now if it has none.
func logTime(log, marker string) int64 {
	for _, f := range strings.Fields(logLine(log, marker)) {
		if v, ok := strings.CutPrefix(f, "time="); ok {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return t.UnixNano()
			}
		}
	}
	return time.Now().UnixNano()
}

// writeRows inserts n outbox rows with INSERT ... SELECT generate_series, perTxn rows per statement (each
// statement its own transaction) and perAgg rows (versions 1 to perAgg) per aggregate. Every row's payload
// is the same size bytes, with the send time taken before the first INSERT (latency is then the age of the
// rows). With vacuum, VACUUM ANALYZE follows, as autovacuum would have left a table that has been there a
// while.
func writeRows(ctx context.Context, url string, n, perAgg, size, perTxn int, vacuum bool) error {
	db, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("write rows: %w", err)
	}
	defer db.Close(context.Background())
	body := payload(size, time.Now())
	for lo := 0; lo < n; lo += perTxn {
		hi := min(n, lo+perTxn) - 1
		_, err := db.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			SELECT gen_random_uuid(), 'order', 'agg-' || (i / $3), i % $3 + 1, 'created', $4::jsonb
			FROM generate_series($1::int, $2::int) AS i`, lo, hi, perAgg, body)
		if err != nil {
			return fmt.Errorf("write rows: %w", err)
		}
	}
	if !vacuum {
		return nil
	}
	if _, err := db.Exec(ctx, "VACUUM ANALYZE outbox"); err != nil {
		return fmt.Errorf("write rows: vacuum: %w", err)
	}
	return nil
}

// writeBacklog inserts n outbox rows, each in its own transaction, over writers connections: a DO block
// per connection that commits after every INSERT, so that a large backlog of 1-row transactions is
// written in seconds rather than with a round trip each. Each row is its own aggregate.
func writeBacklog(ctx context.Context, url string, n, writers, size int) error {
	body := strings.ReplaceAll(payload(size, time.Now()), "'", "''")
	errs := make(chan error, writers)
	for w := 0; w < writers; w++ {
		go func(w int) {
			db, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- fmt.Errorf("write backlog: %w", err)
				return
			}
			defer db.Close(context.Background())
			_, err = db.Exec(ctx, fmt.Sprintf(`DO $$ BEGIN
				FOR i IN %d..%d BY %d LOOP
					INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
					VALUES (gen_random_uuid(), 'order', 'agg-' || i, 1, 'created', '%s'::jsonb);
					COMMIT;
				END LOOP;
			END $$`, w, n-1, writers, body), pgx.QueryExecModeSimpleProtocol)
			if err != nil {
				err = fmt.Errorf("write backlog: %w", err)
			}
			errs <- err
		}(w)
	}
	var first error
	for w := 0; w < writers; w++ {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// extraRows writes the table rows of the extra modes: the ratio is the router's rate over the bare
// publisher's in the same mode and run (the same number of messages).
func extraRows(b *strings.Builder, c config, all map[string][]result) {
	for _, m := range extraModes(c) {
		ceiling := all[m.name()+"/"+bare]
		for _, sys := range []string{bare, router} {
			writeRow(b, m.name(), sys, all[m.name()+"/"+sys], ceiling, "–", sys != bare)
		}
	}
}

// extraNote explains the extra modes' rows under the table.
func extraNote(c config) string {
	if len(extraModes(c)) == 0 {
		return ""
	}
	return "Snapshot, backlog and one transaction: / ceiling is the router's rate over the bare publisher's in the same mode and run, over the same number of messages (modes of the same size share one bare publisher run). Snapshot: rows written before the slot exists, events/s from the slot's creation to the last delivery. Backlog: 1-row transactions, from the first delivery to the last. One transaction: one INSERT ... SELECT committed while the router streams, from the commit to the last delivery. Latency there is the age of the rows.\n"
}
