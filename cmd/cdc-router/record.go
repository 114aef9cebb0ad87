package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/registry"
)

// keepRecord starts keeping the router's record (registry.Keep) in its schema for as long as it runs: what
// it runs with and its state. The function it returns records the stop (with err, the router's exit
// error) and returns once that is written or its own bound passed.
func keepRecord(ctx context.Context, s *settings, f runFlags, r router, stats *metrics.Stats, log *slog.Logger) func(error) {
	rec := registry.Record{Slot: r.cfg.Slot, Publication: r.cfg.Publication, Tables: *f.pg.tables,
		Mappings: mappingTexts(*f.mappingFiles, *f.pg.tables), MessagePrefix: *f.messagePrefix, Shard: r.shard,
		Exchange: *f.broker.exchange, Settings: s.settingsMap(), Version: version}
	url := *f.pg.url
	connect := func(ctx context.Context) (*pgx.Conn, error) { return pgserver.ConnectSQLWithin(ctx, url, *f.pgTimeout) }
	var exit atomic.Pointer[error]
	state := func() (string, error) {
		st, _, last := stats.State()
		if e := exit.Load(); e != nil && *e != nil && st == metrics.StateStopped {
			return st, *e
		}
		if last != "" {
			return st, errors.New(last)
		}
		return st, nil
	}
	kctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan struct{})
	go func() {
		defer close(done)
		registry.Keep(kctx, connect, *f.pg.schema, rec, state, log)
	}()
	return func(err error) {
		exit.Store(&err)
		stop()
		<-done
	}
}

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
