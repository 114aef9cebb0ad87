package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/registry"
)

// keepRecord starts keeping the router's record (registry.Keep) in its schema for as long as it runs: what
// it runs with and its state. The function it returns records the stop (with err, the router's exit
// error) and returns once that is written, or once what is left of --shutdown-timeout since the stop was
// asked for has passed (a stalled PostgreSQL must not hold the exit past the bound; the record then shows
// the process as stale once its heartbeat is old), or after finalWriteBound when nobody asked for the stop.
func keepRecord(ctx context.Context, s *settings, f runFlags, r router, stats *metrics.Stats, log *slog.Logger) func(error) {
	rec := registry.Record{Slot: r.cfg.Slot, Publication: r.cfg.Publication, Tables: *f.pg.tables,
		Mappings: mappingTexts(*f.mappingFiles, *f.pg.tables), MessagePrefix: *f.messagePrefix, Shard: r.shard,
		Exchange: *f.broker.exchange, Settings: s.settingsMap(), Version: version}
	url := *f.pg.url
	connect := func(ctx context.Context) (*pgx.Conn, error) { return pgserver.ConnectSQLWithin(ctx, url, *f.pgTimeout) }
	var exit atomic.Pointer[error]
	state := func() registry.State {
		st, _, last := stats.State()
		s := registry.State{Role: st}
		if limit, inflight, ok := r.rcfg.Metrics.Publishing(); ok && (st == metrics.StateStreaming || st == metrics.StateSnapshot) {
			s.Publishing = &registry.Publishing{WindowLimit: limit, InFlight: inflight}
		}
		if e := exit.Load(); e != nil && *e != nil && st == metrics.StateStopped {
			s.Err = *e
		} else if last != "" {
			s.Err = errors.New(last)
		}
		return s
	}
	kctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		registry.Keep(kctx, connect, *f.pg.schema, rec, state, log)
	}()
	asked := make(chan time.Time, 1) // when the stop was asked for (SIGTERM, SIGINT)
	context.AfterFunc(ctx, func() { asked <- time.Now() })
	return func(err error) {
		exit.Store(&err)
		stop()
		bound := finalWriteBound
		if ctx.Err() != nil { // the stop was asked for: AfterFunc notes when, if it has not yet
			at := <-asked
			bound = min(bound, *f.shutdown-time.Since(at))
		}
		t := time.NewTimer(max(bound, 0))
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
	}
}

// finalWriteBound bounds the wait for the record of a stop that nobody asked for (a refusal).
const finalWriteBound = 3 * time.Second

// mappingTexts are the mapping files' texts by the table each maps (a file without table= maps the first
// table), as the record keeps them; loadMappings has already refused what it cannot read.
func mappingTexts(paths, tables []string) map[string]string {
	out := map[string]string{}
	for _, path := range paths {
		text, err := os.ReadFile(path)
		if err != nil {
			continue
		}
		m, err := mapping.ParseMapping(string(text))
		if err != nil {
			continue
		}
		table := m.Table
		if table == "" {
			table = decode.QualifiedTable(tables[0])
		}
		out[table] = strings.TrimSpace(string(text))
	}
	return out
}
