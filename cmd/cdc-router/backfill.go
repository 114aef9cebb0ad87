package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/pubcheck"
	"github.com/cdc-router/cdc-router/registry"
	"github.com/cdc-router/cdc-router/route"
	"github.com/cdc-router/cdc-router/snapshot"
)

func runBackfill(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	s := newSettings("backfill", env, stderr)
	pg := addPGFlags(s)
	broker := addBrokerFlags(s)
	where := s.String("where", "", "SQL predicate choosing the rows to publish again, e.g. \"occurred_at >= '2026-11-01'\" (required; use 'true' for all)")
	rate := s.Int("rate", 0, "rows per second at most (0: as fast as confirms allow)")
	name := s.String("name", "", "name of this backfill, to resume it after a crash (default: derived from --where and --exchange)")
	restart := s.Bool("restart", false, "run a finished backfill of the same name again")
	mappingFile := s.String("config", "", "the --config file that run reads the table with, when it is in another shape (Debezium's outbox router options; see docs/migrating-from-polling.md): the rows are then read in its primary key's order and mapped as the stream maps them (off when empty: the native shape)")
	pgTimeout := s.Duration("pg-timeout", pgserver.DefaultPGTimeout, "bound on waiting for a PostgreSQL that accepts TCP but does not answer: each connection attempt and, while rows are copied, a probe on a connection of its own every half of it; then the backfill stops with an error that says so, and the same command resumes it")
	shutdown := s.Duration("shutdown-timeout", 10*time.Second, "bound on a stop (SIGINT, SIGTERM): waiting for the confirms of the rows already published (for half of it) and storing how far they reach; the same command resumes from there")
	httpAddr := s.String("http-addr", "", "serve /healthz and /metrics (the backfill's rows published, the broker's metrics) on this address while the backfill runs (off when empty)")
	if err := parse(s, args); err != nil {
		return err
	}
	if err := requireURL(pg); err != nil {
		return err
	}
	if err := pg.oneTable("backfill"); err != nil {
		return err
	}
	if *where == "" {
		return usageError{fmt.Errorf("--where is required: say which rows to publish again (use --where true for all)")}
	}
	log, err := broker.logger(stderr)
	if err != nil {
		return err
	}
	broker.limitMemory(env)
	read, err := pgserver.ConnectReaderWithin(ctx, *pg.url, *pgTimeout)
	if err != nil {
		return err
	}
	defer closeWithin(read, time.Second) // a silent server must not hold the exit
	state, err := pgserver.ConnectSQLWithin(ctx, *pg.url, *pgTimeout)
	if err != nil {
		return err
	}
	defer closeWithin(state, time.Second)
	if err := migrations.CheckSchemaVersion(ctx, state, *pg.schema); err != nil {
		return err
	}
	mappings, err := backfillRouter(ctx, state, pg, broker, *mappingFile)
	if err != nil {
		return err
	}
	if *name == "" {
		sum := sha256.Sum256([]byte(*where + "\x00" + *broker.exchange))
		*name = hex.EncodeToString(sum[:6])
	}
	rcfg := broker.route("cdc-router backfill")
	count := func(p snapshot.Publisher) snapshot.Publisher { return p }
	if *httpAddr != "" {
		reg, rm, counted, err := backfillMetrics()
		if err != nil {
			return err
		}
		if err := serveHTTP(ctx, *httpAddr, metricsOnly(reg), "/healthz and /metrics", log); err != nil {
			return usageError{err}
		}
		rcfg.Metrics, count = rm, counted
	}
	r, err := route.Dial(ctx, rcfg, log)
	if err != nil {
		return err
	}
	defer func() { r.Close() }()
	cfg := snapshot.Config{Table: pg.table(), Schema: *pg.schema, Slot: "backfill:" + *name, Where: *where, Rate: float64(*rate),
		Decode: broker.decode(pg.table()), RefusalRetry: *broker.refusalRetry}
	cfg.Renew = func(ctx context.Context) (snapshot.Publisher, error) { // the copy's safety net: a new connection
		r.Close()
		next, err := route.Dial(ctx, rcfg, log)
		if err != nil {
			return nil, err
		}
		r = next
		return count(r), nil
	}
	cfg.Decode.Mapping = mappings[decode.QualifiedTable(pg.table())]
	silence := pgserver.Silence{URL: *pg.url, Timeout: *pgTimeout, Who: "the backfill",
		Then: "run the same backfill again once PostgreSQL answers: it resumes after its last confirmed row (the bound is --pg-timeout)"}
	wctx, end := silence.Watch(ctx)
	cfg.StopBy = func() (settle, stop time.Time) {
		now := time.Now()
		if context.Cause(wctx) != ctx.Err() { // the silent server: nothing more is stored there
			return now, now
		}
		return now.Add(*shutdown / 2), now.Add(*shutdown)
	}
	// While a publication gap of the table is recorded, a backfill first waits for the transactions that may
	// have written in the gap and still run: its snapshot would not hold their rows.
	var job snapshot.Job
	err = pubcheck.AwaitGapWriters(wctx, state, *pg.schema, *pg.slot, pg.table(), log)
	if err == nil {
		job, err = snapshot.Backfill(wctx, cfg, read, state, *name, *restart, count(r), log, terminal(stderr))
	}
	if err = end(err); err != nil {
		return err
	}
	quarantined, err := snapshot.Quarantined(ctx, state, *pg.schema, job)
	if err != nil {
		return err
	}
	if quarantined == 0 {
		fmt.Fprintf(stdout, "backfill %s done: %d rows published to %s\n", *name, job.RowsDone, *broker.exchange)
	} else {
		fmt.Fprintf(stdout, "backfill %s done: %d rows, %d published to %s and %d quarantined (cdc-router quarantine list --open)\n",
			*name, job.RowsDone, job.RowsDone-quarantined, *broker.exchange, quarantined)
	}
	slots, err := pubcheck.ClearPublicationGaps(ctx, state, *pg.schema, *pg.slot, pg.table(), *where)
	if err != nil {
		return err
	}
	for _, slot := range slots {
		fmt.Fprintf(stdout, "the publication gap of %s recorded for slot %s is backfilled: its router starts again\n", pg.table(), slot)
	}
	return nil
}

// backfillRouter takes the slot, the table, its mapping and the exchange from the record of the router
// that reads the table (fromRecord), each unless given; the --config file, when given, maps the table.
func backfillRouter(ctx context.Context, conn *pgx.Conn, pg pgFlags, broker brokerFlags, mappingFile string) (map[string]*decode.Mapping, error) {
	recs, err := registry.List(ctx, conn, *pg.schema)
	if err != nil {
		return nil, err
	}
	if pg.set.sources["slot"] == sourceDefault && pg.set.sources["table"] != sourceDefault {
		var reading []registry.Record // the routers that read the table named
		for _, r := range recs {
			if slices.ContainsFunc(r.Tables, func(t string) bool { return decode.QualifiedTable(t) == decode.QualifiedTable(pg.table()) }) {
				reading = append(reading, r)
			}
		}
		recs = reading
	}
	if err := slotOf(pg.set, pg.slot, recs); err != nil {
		return nil, err
	}
	rec, ok, err := fromRecord(ctx, conn, pg.set, *pg.schema, *pg.slot, recorded{"exchange", broker.exchange, exchangeOf})
	if err != nil {
		return nil, err
	}
	if ok && pg.set.sources["table"] == sourceDefault {
		if len(rec.Tables) > 1 {
			return nil, usageError{fmt.Errorf("the router of slot %s reads %s: name the table to backfill with --table",
				rec.Slot, strings.Join(rec.Tables, ", "))}
		}
		*pg.tables = slices.Clone(rec.Tables)
	}
	if mappingFile != "" {
		return loadMappings([]string{mappingFile}, *pg.tables, "")
	}
	if !ok {
		return nil, nil
	}
	return recordedMappings(rec)
}

// closeWithin closes conn, waiting at most d for the server to take the goodbye.
func closeWithin(conn *pgx.Conn, d time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	conn.Close(ctx)
}

// terminal returns w when it is a terminal (for progress lines), nil otherwise.
func terminal(w io.Writer) io.Writer {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	return w
}
