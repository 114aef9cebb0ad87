package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/copyboth"
	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/initial"
	"github.com/cdc-router/cdc-router/internal/build"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/pubcheck"
	"github.com/cdc-router/cdc-router/quarantine"
)

// startupGrace is how long connection failures are retried before the first successful start; after it,
// the router gives up with the last error instead of retrying a setup that never worked. A run that got as
// far as the initial snapshot's copy has a setup that works: its failures are retried as a streaming
// router's are, however long the copy took. So has a standby, which reached PostgreSQL and found the slot
// held: it outlasts an outage as the active router does (it is there to take over after one).
const startupGrace = 30 * time.Second

// standbyRetry is how often a router in standby tries to take the slot. It bounds the takeover after the
// active router dies, next to how fast PostgreSQL ends the dead router's session and walsender.
const standbyRetry = time.Second

// Run streams until ctx ends, restarting in-process from the acknowledged position after any failure
// with bounded exponential backoff and jitter. While another router holds the slot it stands by
// (metrics.StateStandby), which is not a restart. It returns nil after a graceful stop, within
// cfg.ShutdownTimeout of ctx's end, and a *Fatal (or a migrations.Problem) when the router must not go on.
func Run(ctx context.Context, cfg Config, dial Dialer, log *slog.Logger, stats *metrics.Stats) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return &Fatal{Msg: err.Error()}
	}
	if stats == nil {
		stats = &metrics.Stats{}
	}
	log = log.With("slot", cfg.Slot)
	stats.SetSilentAfter(cfg.PGTimeout)
	stats.SetState(metrics.StateStarting, nil)
	stop := newStopClock(ctx, cfg.ShutdownTimeout)
	wctx, endWatch := context.WithCancel(ctx)
	defer endWatch()
	go watchWaits(wctx, log, stats, longWait(cfg.PGTimeout), cfg.PGTimeout)
	go cfg.Fence.watch(wctx)
	began := time.Now()
	started, standby := false, false
	stoodBy := false // found the slot held by another router at least once: the connection works
	copied := false  // a run reached the initial snapshot's copy: the setup works
	backoff := 100 * time.Millisecond
	var spare *spareProbe // while standing by: the check that it could take over
	defer func() { spare.stop() }()
	net := newSafetyNet(cfg.RefusalRetry)
	resume := &resumePoint{build: build.ID()}
	stopped := func() error {
		stats.SetState(metrics.StateStopped, nil)
		log.Info("stopped", "published", stats.Published(), "quarantined", stats.Quarantined())
		return nil
	}
	for {
		progressed, err := runOnce(ctx, cfg, dial, log, stats, &started, &copied, net, resume, stop)
		if err == nil || (ctx.Err() != nil && !IsFatal(err)) {
			return stopped()
		}
		if IsFatal(err) {
			return err
		}
		if cdc.Permanent(err) {
			return &Fatal{Msg: err.Error()}
		}
		if f := pgserver.PermanentSetupError(err); f != nil {
			if g := missingGrants(ctx, cfg, log, err); g != nil {
				return g
			}
			return f
		}
		if errors.Is(err, pgserver.ErrSlotBusy) {
			if !standby {
				log.Info("another router holds slot "+cfg.Slot+"; standing by", "retry", standbyRetry.String(), "reason", err)
			} else {
				log.Debug("slot still busy; standing by", "error", err)
			}
			standby, stoodBy = true, true
			resume.standBy()
			stats.SetState(metrics.StateStandby, nil)
			if cfg.StandbyProbe != nil && !spare.running() {
				spare.stop()
				spare = startSpareProbe(ctx, cfg.StandbyProbe, log, stats)
			}
			if !sleep(ctx, standbyRetry) {
				return stopped()
			}
			continue
		}
		standby = false
		if !started && !copied && !stoodBy && time.Since(began) > startupGrace {
			return &Fatal{Msg: err.Error()}
		}
		if progressed {
			backoff = 100 * time.Millisecond
		}
		if net.failed(err) {
			log.Warn("RabbitMQ refused a message: the events up to the furthest received position are published one "+
				"at a time, and one refused "+fmt.Sprint(strikesToQuarantine)+" times in a row is quarantined (a return "+
				"or a nack only once --refusal-retry has passed since the first)", "lsn", net.until, "refusal_retry", net.strikes.Period)
		}
		wait := withinGrace(backoff/2+rand.N(backoff/2+1), began, started || copied || stoodBy)
		if errors.Is(err, pgserver.ErrStandby) {
			// A failover in progress: look for the promoted standby every second instead of backing off further.
			wait = min(wait, standbyRetry)
		}
		cause := causeOf(err)
		stats.Restarted(cause)
		stats.SetState(metrics.StateRestarting, err)
		stats.WaitFor(fmt.Sprintf(restartWait+"%s failure (backoff %v)", cause, wait.Round(time.Millisecond)))
		log.Warn("stream stopped; restarting from the acknowledged position", "cause", cause, "error", err,
			"backoff", wait.Round(time.Millisecond), "lsn", stats.Acknowledged())
		if !sleep(ctx, wait) {
			return stopped()
		}
		backoff = min(2*backoff, cfg.MaxBackoff)
	}
}

// sleep waits d and reports false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// runOnce is one stream run: checks, slot decision, publisher, START_REPLICATION, stream. It reports
// whether the acknowledged position moved.
func runOnce(ctx context.Context, cfg Config, dial Dialer, log *slog.Logger, stats *metrics.Stats, started, copied *bool,
	net *safetyNet, resume *resumePoint, stop *stopClock) (bool, error) {
	host := pgserver.Host(cfg.PGURL)
	stats.WaitFor("PostgreSQL at " + host + " to accept the router's ordinary connection")
	sql, err := pgserver.ConnectSQLWithin(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := stop.closeContext()
		sql.Close(cctx)
		cancel()
	}()
	stats.WaitFor("PostgreSQL at " + host + " to answer the start-up checks")
	watch := pubcheck.NewWatch(cfg.pubcheckConfig(), log, stats)
	var lock slotLock
	err = pgserver.SetupStep(ctx, cfg.PGTimeout, host, func(ctx context.Context) error {
		// One router per slot, also while the slot is not streamed yet (during the initial snapshot): the lock
		// belongs to this session and goes with it (slotlock.go).
		var err error
		if lock, err = lockSlot(ctx, sql, cfg.Slot); err != nil {
			return err
		}
		if err := migrations.Check(ctx, sql, cfg.migrationsConfig(log)); err != nil {
			return pubcheck.WithBackfillHint(ctx, sql, cfg.pubcheckConfig(), err)
		}
		if cfg.Decode.MessagePrefix != "" { // read at every start of the stream: a restart picks up a rotated key
			var err error
			if cfg.Decode.EmitKeys, err = migrations.LoadEmitKeys(ctx, sql, cfg.Schema); err != nil {
				return err
			}
			warnEmitKeyReaders(ctx, sql, cfg.Schema, log)
		}
		return watch.Begin(ctx, sql, *started)
	})
	if err != nil {
		return false, err
	}
	stats.WaitFor("PostgreSQL at " + host + " to accept the router's replication connection")
	conn, wire, err := connectReplication(ctx, cfg.PGURL, cfg.PGTimeout, cfg.Fence.Lease())
	if err != nil {
		return false, err
	}
	defer cfg.Fence.end() // after the publisher's close (a later defer): no write goes once the run has returned
	defer func() {
		cctx, cancel := stop.closeContext()
		conn.Close(cctx)
		cancel()
	}()
	stats.WaitFor("PostgreSQL at " + host + " to answer the start-up checks")
	var sys pglogrepl.IdentifySystemResult
	var p plan
	store := offsets.NewStore(sql, cfg.Schema, cfg.Slot, cfg.StoreInterval)
	err = pgserver.SetupStep(ctx, cfg.PGTimeout, host, func(ctx context.Context) error {
		if err := lock.moveTo(ctx, conn, cfg.Fence); err != nil { // the lock goes with the walsender (slotlock.go)
			return err
		}
		if sys, err = pglogrepl.IdentifySystem(ctx, conn); err != nil {
			return fmt.Errorf("identify system: %w", err)
		}
		if err := pgserver.CheckTimeline(ctx, cfg.Slot, log, conn, store, sys); err != nil {
			return err
		}
		p, err = planStart(ctx, cfg, sql, store, sys)
		return err
	})
	if err != nil {
		return false, err
	}
	stats.WaitFor("RabbitMQ to accept the router's connection")
	first, err := dial(ctx)
	if err != nil {
		return false, caused(metrics.CauseBroker, err)
	}
	pub := &renewable{Publisher: first, dial: dial} // the snapshot's safety net may replace it
	defer func() {
		if !stop.closeWithin(pub) {
			log.Warn("the RabbitMQ connection did not close within the shutdown timeout; exiting without waiting for it")
		}
	}()
	if p.Decision.Create && cfg.Snapshot == "initial" || len(p.jobs) > 0 {
		*copied = true
	}
	start, err := p.execute(ctx, cfg, log, stats, conn, lock, store, sys, pub, stop)
	if err != nil {
		return false, err
	}
	start = resume.past(start, sys, p.Decision.Create)
	err = pgserver.SetupStep(ctx, cfg.PGTimeout, host, func(ctx context.Context) error {
		return adoptRefusal(ctx, store, net, start) // the safety net lives with the slot (strike.go)
	})
	if err != nil {
		return false, err
	}
	stats.WaitFor("PostgreSQL at " + host + " to start replication")
	err = pgserver.SetupStep(ctx, cfg.PGTimeout, host, func(ctx context.Context) error {
		asked := time.Now()
		defer func() { cfg.Fence.grant(asked, cfg.Fence.valid()) }() // PostgreSQL answered on the lock's session
		err := pglogrepl.StartReplication(ctx, conn, cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
			PluginArgs: pgserver.PluginArgs(cfg.Publication, cfg.Decode.MessagePrefix != ""),
		})
		if err != nil {
			return pgserver.ExplainStart(err, cfg.Slot, cfg.Decode.MessagePrefix != "")
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	*started = true
	prev, _, _ := stats.State()
	stats.SetState(metrics.StateStreaming, nil)
	// previous says what this start follows: starting (the process's first), restarting (after a failure),
	// standby (this router took the slot over) or snapshot (the initial snapshot is done).
	log.Info("streaming", "lsn", start, "previous", prev, "publication", cfg.Publication, "system_id", sys.SystemID,
		"timeline", sys.Timeline)
	s := &session{ctx: ctx, stop: stop, cfg: cfg, log: log, sql: sql, store: store, tracker: offsets.NewTracker(start),
		dec: decode.New(cfg.Decode), sys: sys, stats: stats,
		walReceiver:  walReceiver{conn: conn, live: newLiveness(cfg.PGTimeout, time.Now())},
		txns:         txns{pending: carried(stats.TakeCarried(start))},
		publishing:   publishing{pub: pub, net: net, flight: metrics.NewFlight()},
		quarantining: quarantining{quar: quarantine.NewStore(sql, cfg.Schema, cfg.Slot)},
		duties: duties{watch: watch, emitKeys: newEmitKeyWatch(cfg, log),
			progress: metrics.NewProgressLog(log, stats, cfg.ProgressInterval)}}
	s.frames = copyboth.NewFrames(wire, s.dec.MessagePrefix(), s.dec.MessageLimit())
	stats.SetFlight(s.flight)
	defer stats.SetFlight(nil)
	watch.Schedule(time.Now())
	net.received = 0
	s.markConfig = markConfig(cfg, resume.build)
	s.resumeAt = resume.choose(p.Stored, p.HasStored, sys, s.markConfig, start)
	from := s.resumeAt
	if err = s.stream(); err != nil && causeOf(err) == metrics.CausePostgres {
		err = pgserver.Stalled(err, host)
	}
	if err != nil && ctx.Err() == nil {
		// Unready at once: closing the publisher below takes seconds on a stalled broker, and a standby
		// may take the slot meanwhile (seed 9057: both processes of a slot answered /readyz?active=1 200).
		stats.SetState(metrics.StateRestarting, err)
	}
	s.flushBursts()
	if err != nil && ctx.Err() == nil && causeOf(err) != metrics.CausePostgres {
		s.strike(err)
		s.ackConfirmed()
	}
	m := s.mark()
	resume.record(m, s.markConfig, sys, s.tracker.Watermark())
	stats.Carry(oldestCommit(s.pending), s.sent)
	// Progress inside a transaction counts: a long one cut again and again still moves, so the backoff
	// stays short.
	return s.tracker.Watermark() > start || m.Confirmed() > 0 && (m.Key != from.Key || m.Confirmed() > from.Confirmed()), err
}

// plan is what a run does before streaming, decided before anything is created or published: what the
// slot and the stored position say (pgserver.StartPlan), and the initial snapshots to finish.
type plan struct {
	pgserver.StartPlan
	jobs  []initial.Job // the initial snapshots to finish (resumed or never recorded), in --table order
	fresh bool          // the slot exists with neither a stored position nor a snapshot record
}

// planStart applies the refusal rules (pgserver.PlanStart) and decides whether a snapshot is needed.
func planStart(ctx context.Context, cfg Config, sql *pgx.Conn, store *offsets.Store,
	sys pglogrepl.IdentifySystemResult) (plan, error) {
	unfinished := func(ctx context.Context) (string, error) {
		return initial.Unfinished(ctx, cfg.initialConfig(nil, nil), sql)
	}
	sp, err := pgserver.PlanStart(ctx, sql, store, cfg.startRules(), sys, unfinished)
	if err != nil {
		return plan{}, err
	}
	p := plan{StartPlan: sp}
	if sp.Decision.Create {
		return p, nil
	}
	p.jobs, p.fresh, err = initial.Due(ctx, cfg.initialConfig(nil, nil), sql, sp.Decision.Start, sp.HasStored)
	return p, err
}

// execute creates the slot (with its snapshot) or finishes a snapshot, and returns the position to
// stream from.
func (p plan) execute(ctx context.Context, cfg Config, log *slog.Logger, stats *metrics.Stats, conn *pgconn.PgConn,
	lock slotLock, store *offsets.Store, sys pglogrepl.IdentifySystemResult, pub Publisher, stop *stopClock) (cdc.LSN, error) {
	sql := lock.sql
	pos := func(l cdc.LSN) offsets.Position {
		return offsets.Position{LSN: l, SystemID: sys.SystemID, Timeline: sys.Timeline}
	}
	err := pgserver.SetupStep(ctx, cfg.PGTimeout, pgserver.Host(cfg.PGURL), func(ctx context.Context) error {
		if err := p.Prepare(ctx, log, conn, sql, cfg.Schema, cfg.Slot, sys); err != nil {
			return err
		}
		if p.Decision.Create && cfg.Snapshot == "initial" {
			return initial.CheckTables(ctx, cfg.copyConfig(pub, stop, stats), sql)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	switch {
	case p.Decision.Create && cfg.Snapshot == "initial":
		return createWithSnapshot(ctx, cfg, log, stats, conn, lock, store, pos, pub, stop)
	case p.Decision.Create:
		stop := pgserver.WatchCreation(ctx, cfg.PGURL, cfg.Slot, cfg.PGTimeout, log, stats.WaitFor)
		point, err := pgserver.CreateSlot(ctx, conn, cfg.Slot, cfg.FailoverSlot)
		stop()
		if err != nil {
			return 0, err
		}
		log.Info("created replication slot without a snapshot (--snapshot=never)", "lsn", point)
		// Store the position at once: from now on a vanished slot is detected instead of silently replaced.
		return point, store.Save(ctx, pos(point), true)
	case len(p.jobs) > 0:
		if err := lock.fence(ctx, stats); err != nil {
			return 0, err
		}
		err := lock.holding(ctx, cfg, stats, log, func(ctx context.Context) error {
			return initial.Finish(ctx, cfg.copyConfig(pub, stop, stats), log, stats, sql, store, pos(p.Decision.Start), p.jobs,
				p.fresh, pub)
		})
		if err != nil {
			return 0, err
		}
	}
	return p.Decision.Start, nil
}

// createWithSnapshot creates the slot with an exported snapshot and has the initial snapshot copy the rows
// visible in it (initial.Copy) before the replication connection runs anything else; it returns the slot's
// consistent point, where the stream starts. Both run under the lock's lease (slotLock.holding).
func createWithSnapshot(ctx context.Context, cfg Config, log *slog.Logger, stats *metrics.Stats, conn *pgconn.PgConn,
	lock slotLock, store *offsets.Store, pos func(cdc.LSN) offsets.Position, pub Publisher, stop *stopClock) (cdc.LSN, error) {
	var point cdc.LSN
	err := lock.holding(ctx, cfg, stats, log, func(ctx context.Context) error {
		unwatch := pgserver.WatchCreation(ctx, cfg.PGURL, cfg.Slot, cfg.PGTimeout, log, stats.WaitFor)
		created, snapshotName, err := pgserver.CreateSlotWithSnapshot(ctx, conn, cfg.Slot, cfg.FailoverSlot)
		unwatch()
		if err != nil {
			return err
		}
		point = created
		return initial.Copy(ctx, cfg.copyConfig(pub, stop, stats), log, stats, lock.sql, store, pos(point), snapshotName, pub)
	})
	if err != nil {
		return 0, err
	}
	return point, nil
}

// migrationsConfig is what the start-up checks (migrations.Check) are given.
func (cfg Config) migrationsConfig(log *slog.Logger) migrations.Config {
	return migrations.Config{Table: cfg.Table, Publication: cfg.Publication, Schema: cfg.Schema, Mapping: cfg.Decode.Mapping,
		MoreTables: cfg.Decode.MoreTables, Notice: func(msg string) { log.Info(msg) }}
}

// missingGrants is, after PostgreSQL refused the router's role a right while it ran (42501: a GRANT revoked
// from it meanwhile, such as INSERT on its positions), the start-up checks' refusal naming every GRANT the
// role lacks, so that the router stops naming the GRANT to run rather than only PostgreSQL's "permission
// denied for table positions"; nil for another error, or when the checks pass or cannot run within
// --pg-timeout (the caller's refusal then stands).
func missingGrants(ctx context.Context, cfg Config, log *slog.Logger, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.PGTimeout)
	defer cancel()
	sql, err := pgserver.ConnectSQLWithin(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return nil
	}
	defer sql.Close(context.Background())
	var p *migrations.Problem
	if err := migrations.Check(ctx, sql, cfg.migrationsConfig(log)); errors.As(err, &p) {
		return err
	}
	return nil
}

// copyConfig is initialConfig for a copy of this run. It tells stats of the copy's silence probes
// (initial.Config.WaitOnPostgres), so that /readyz says a silent PostgreSQL within seconds while the copy
// waits on it. The copy runs under the slot lock's lease (slotLock.holding), which ends its context once
// the lock is gone, also while its safety net waits between two publishers (seed 8063 of the harness).
func (cfg Config) copyConfig(pub Publisher, stop *stopClock, stats *metrics.Stats) initial.Config {
	ic := cfg.initialConfig(pub, stop)
	ic.WaitOnPostgres = stats.WaitOnPostgres
	return ic
}
