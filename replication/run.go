package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/offsets"
)

// startupGrace is how long connection failures are retried before the first successful start; after it,
// the router gives up with the last error instead of retrying a setup that never worked.
const startupGrace = 30 * time.Second

// Stats counts what the stream did since the process started.
type Stats struct {
	published   atomic.Int64
	quarantined atomic.Int64
	restarts    atomic.Int64
}

// Published is the number of events confirmed by the broker.
func (s *Stats) Published() int64 { return s.published.Load() }

// Quarantined is the number of rows written to the quarantine table.
func (s *Stats) Quarantined() int64 { return s.quarantined.Load() }

// Restarts is the number of in-process stream restarts after a failure.
func (s *Stats) Restarts() int64 { return s.restarts.Load() }

// Run streams until ctx ends, restarting in-process from the acknowledged position after any failure
// with bounded exponential backoff and jitter. It returns nil after a graceful stop and a *Fatal (or a
// migrations.Problem) when the router must not go on.
func Run(ctx context.Context, cfg Config, dial Dialer, log *slog.Logger, stats *Stats) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return &Fatal{Msg: err.Error()}
	}
	if stats == nil {
		stats = &Stats{}
	}
	log = log.With("slot", cfg.Slot)
	began := time.Now()
	started := false
	backoff := 100 * time.Millisecond
	for {
		progressed, err := runOnce(ctx, cfg, dial, log, stats, &started)
		if err == nil || (ctx.Err() != nil && !IsFatal(err)) {
			log.Info("stopped", "published", stats.Published(), "quarantined", stats.Quarantined())
			return nil
		}
		if IsFatal(err) {
			return err
		}
		if !started && time.Since(began) > startupGrace {
			return &Fatal{Msg: err.Error()}
		}
		if progressed {
			backoff = 100 * time.Millisecond
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		stats.restarts.Add(1)
		log.Warn("stream stopped; restarting from the acknowledged position", "error", err, "backoff", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
		backoff = min(2*backoff, cfg.MaxBackoff)
	}
}

// runOnce is one stream run: checks, slot decision, publisher, START_REPLICATION, stream. It reports
// whether the acknowledged position moved.
func runOnce(ctx context.Context, cfg Config, dial Dialer, log *slog.Logger, stats *Stats, started *bool) (bool, error) {
	sql, err := ConnectSQL(ctx, cfg.PGURL)
	if err != nil {
		return false, err
	}
	defer sql.Close(context.Background())
	mcfg := migrations.Config{Table: cfg.Table, Publication: cfg.Publication, Schema: cfg.Schema}
	if err := migrations.Check(ctx, sql, mcfg); err != nil {
		return false, err
	}
	conn, err := connectReplication(ctx, cfg.PGURL)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return false, fmt.Errorf("identify system: %w", err)
	}
	store := offsets.NewStore(sql, cfg.Schema, cfg.Slot, cfg.StoreInterval)
	start, err := prepareSlot(ctx, cfg, log, conn, sql, store, sys)
	if err != nil {
		return false, err
	}
	pub, err := dial(ctx)
	if err != nil {
		return false, err
	}
	defer pub.Close()
	err = pglogrepl.StartReplication(ctx, conn, cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + strings.ReplaceAll(cfg.Publication, "'", "''") + "'"},
	})
	if err != nil {
		return false, startError(err, cfg)
	}
	*started = true
	log.Info("streaming", "lsn", start, "publication", cfg.Publication, "system_id", sys.SystemID, "timeline", sys.Timeline)
	s := &session{cfg: cfg, log: log, conn: conn, sql: sql, store: store, tracker: offsets.NewTracker(start),
		pub: pub, dec: decode.New(cfg.Decode), sys: sys, stats: stats, lastHeard: time.Now(),
		silence: silenceLimit(ctx, sql)}
	err = s.stream(ctx)
	return s.tracker.Watermark() > start, err
}

// silenceLimit is twice the server's wal_sender_timeout plus a margin: a live walsender sends a keepalive
// at least every half timeout. With the timeout disabled (0) the check is off.
func silenceLimit(ctx context.Context, sql *pgx.Conn) time.Duration {
	var ms int64
	if err := sql.QueryRow(ctx, "SELECT setting::bigint FROM pg_settings WHERE name = 'wal_sender_timeout'").Scan(&ms); err != nil || ms <= 0 {
		return 0
	}
	return 2*time.Duration(ms)*time.Millisecond + 10*time.Second
}

// prepareSlot applies the start rules and returns the START_REPLICATION position, creating the slot when
// it is missing and no position was ever stored.
func prepareSlot(ctx context.Context, cfg Config, log *slog.Logger, conn *pgconn.PgConn, sql *pgx.Conn,
	store *offsets.Store, sys pglogrepl.IdentifySystemResult) (cdc.LSN, error) {
	stored, hasStored, err := store.Load(ctx)
	if err != nil {
		return 0, err
	}
	slot, err := InspectSlot(ctx, sql, cfg.Slot)
	if err != nil {
		return 0, err
	}
	d, err := decideStart(cfg, sys, slot, stored, hasStored)
	if err != nil {
		return 0, err
	}
	if !d.create {
		return d.start, nil
	}
	point, err := createSlot(ctx, conn, cfg.Slot)
	if err != nil {
		return 0, err
	}
	log.Info("created replication slot", "lsn", point)
	// Store the position at once: from now on a vanished slot is detected instead of silently replaced.
	if err := store.Save(ctx, offsets.Position{LSN: point, SystemID: sys.SystemID, Timeline: sys.Timeline}, true); err != nil {
		return 0, err
	}
	return point, nil
}

// startError classifies a failed START_REPLICATION.
func startError(err error, cfg Config) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "55006":
			return fmt.Errorf("slot %s is in use by another process (a second router, or the walsender of one that "+
				"just died, which PostgreSQL ends within wal_sender_timeout): %w", cfg.Slot, err)
		default:
			return streamError(pgErr, cfg)
		}
	}
	return fmt.Errorf("start replication: %w", err)
}
