package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/quarantine"
	"github.com/cdc-router/cdc-router/snapshot"
)

// permanentSetupError turns an error that no retry can fix (a missing privilege, a router table or schema
// that does not exist) into a refusal at once, instead of retrying it through the start-up grace.
func permanentSetupError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch pgErr.Code {
	case "42501":
		return fatalf("PostgreSQL refused the router's role: %s; grant what it needs (docs/operations.md lists "+
			"the grants of a least-privilege role) and start again", pgErr.Message)
	case "42P01", "3F000":
		return fatalf("PostgreSQL says %s: run `cdc-router migrate` (as the owner of the outbox table) and start again",
			pgErr.Message)
	}
	return nil
}

// withBackfillHint adds to a setup problem with the publication which rows to backfill once it is fixed:
// rows inserted while the outbox was out of the publication were never decoded, and never will be.
func withBackfillHint(ctx context.Context, sql *pgx.Conn, cfg Config, err error) error {
	var p *migrations.Problem
	if !errors.As(err, &p) {
		return err
	}
	problem, qerr := publicationProblem(ctx, sql, cfg)
	if qerr != nil || problem == "" {
		return err
	}
	okAt := lastSeen(ctx, sql, cfg)
	if okAt == nil {
		return err
	}
	return &Fatal{Msg: p.Msg + "; " + backfillHint(cfg, okAt)}
}

// startupGrace is how long connection failures are retried before the first successful start; after it,
// the router gives up with the last error instead of retrying a setup that never worked.
const startupGrace = 30 * time.Second

// errSlotBusy marks a slot held by another router (its advisory lock) or walsender (55006 at
// START_REPLICATION): the router stands by, retrying every standbyRetry for as long as it takes, also at
// start, since a second router waits for the first and a restarted one waits for its predecessor's walsender.
var errSlotBusy = errors.New("slot busy")

// standbyRetry is how often a router in standby tries to take the slot. It bounds the takeover after the
// active router dies, next to how fast PostgreSQL ends the dead router's session and walsender.
const standbyRetry = time.Second

// Run streams until ctx ends, restarting in-process from the acknowledged position after any failure
// with bounded exponential backoff and jitter. While another router holds the slot it stands by
// (StateStandby), which is not a restart. It returns nil after a graceful stop, within
// cfg.ShutdownTimeout of ctx's end, and a *Fatal (or a migrations.Problem) when the router must not go on.
func Run(ctx context.Context, cfg Config, dial Dialer, log *slog.Logger, stats *Stats) error {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return &Fatal{Msg: err.Error()}
	}
	if stats == nil {
		stats = &Stats{}
	}
	log = log.With("slot", cfg.Slot)
	stats.silentAfter.Store(int64(cfg.PGTimeout))
	stats.setState(StateStarting, nil)
	stop := newStopClock(ctx, cfg.ShutdownTimeout)
	began := time.Now()
	started, standby := false, false
	backoff := 100 * time.Millisecond
	net := newSafetyNet(cfg.RefusalRetry)
	resume := &resumePoint{build: buildID()}
	stopped := func() error {
		stats.setState(StateStopped, nil)
		log.Info("stopped", "published", stats.Published(), "quarantined", stats.Quarantined())
		return nil
	}
	for {
		progressed, err := runOnce(ctx, cfg, dial, log, stats, &started, net, resume, stop)
		if err == nil || (ctx.Err() != nil && !IsFatal(err)) {
			return stopped()
		}
		if IsFatal(err) {
			return err
		}
		if f := permanentSetupError(err); f != nil {
			return f
		}
		if errors.Is(err, errSlotBusy) {
			if !standby {
				log.Info("another router holds slot "+cfg.Slot+"; standing by", "retry", standbyRetry.String(), "reason", err)
			} else {
				log.Debug("slot still busy; standing by", "error", err)
			}
			standby = true
			began = time.Now() // the start-up grace counts from the end of the standby
			stats.setState(StateStandby, nil)
			if !sleep(ctx, standbyRetry) {
				return stopped()
			}
			continue
		}
		standby = false
		if !started && time.Since(began) > startupGrace {
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
		wait := withinGrace(backoff/2+rand.N(backoff/2+1), began, started)
		if errors.Is(err, errStandby) {
			// A failover in progress: look for the promoted standby every second instead of backing off further.
			wait = min(wait, standbyRetry)
		}
		cause := causeOf(err)
		stats.restarted(cause)
		stats.setState(StateRestarting, err)
		stats.waitFor(fmt.Sprintf("the restart after a %s failure (backoff %v)", cause, wait.Round(time.Millisecond)))
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
func runOnce(ctx context.Context, cfg Config, dial Dialer, log *slog.Logger, stats *Stats, started *bool,
	net *safetyNet, resume *resumePoint, stop *stopClock) (bool, error) {
	host := pgHost(cfg.PGURL)
	stats.waitFor("PostgreSQL at " + host + " to accept the router's ordinary connection")
	sql, err := connectSQL(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := stop.closeContext()
		sql.Close(cctx)
		cancel()
	}()
	stats.waitFor("PostgreSQL at " + host + " to answer the start-up checks")
	watch := &publicationWatch{cfg: cfg, log: log, stats: stats}
	err = setupStep(ctx, cfg.PGTimeout, host, func(ctx context.Context) error {
		// One router per slot, also while the slot is not streamed yet (during the initial snapshot): the lock
		// belongs to this session and goes with it.
		var mine bool
		if err := sql.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended('cdc_router:' || $1, 0))", cfg.Slot).Scan(&mine); err != nil {
			return fmt.Errorf("lock slot %s: %w", cfg.Slot, err)
		}
		if !mine {
			return fmt.Errorf("another router holds slot %s (it may be copying the initial snapshot): %w", cfg.Slot, errSlotBusy)
		}
		mcfg := migrations.Config{Table: cfg.Table, Publication: cfg.Publication, Schema: cfg.Schema, Mapping: cfg.Decode.Mapping,
			MoreTables: cfg.Decode.MoreTables, Notice: func(msg string) { log.Info(msg) }}
		if err := migrations.Check(ctx, sql, mcfg); err != nil {
			return withBackfillHint(ctx, sql, cfg, err)
		}
		if cfg.Decode.MessagePrefix != "" { // read at every start of the stream: a restart picks up a rotated key
			var err error
			if cfg.Decode.EmitKeys, err = migrations.LoadEmitKeys(ctx, sql, cfg.Schema); err != nil {
				return err
			}
		}
		return watch.begin(ctx, sql, *started)
	})
	if err != nil {
		return false, err
	}
	stats.waitFor("PostgreSQL at " + host + " to accept the router's replication connection")
	conn, wire, err := connectReplication(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := stop.closeContext()
		conn.Close(cctx)
		cancel()
	}()
	stats.waitFor("PostgreSQL at " + host + " to answer the start-up checks")
	var sys pglogrepl.IdentifySystemResult
	var p plan
	store := offsets.NewStore(sql, cfg.Schema, cfg.Slot, cfg.StoreInterval)
	err = setupStep(ctx, cfg.PGTimeout, host, func(ctx context.Context) error {
		if sys, err = pglogrepl.IdentifySystem(ctx, conn); err != nil {
			return fmt.Errorf("identify system: %w", err)
		}
		if err := checkTimeline(ctx, cfg, log, conn, store, sys); err != nil {
			return err
		}
		p, err = planStart(ctx, cfg, sql, store, sys)
		return err
	})
	if err != nil {
		return false, err
	}
	stats.waitFor("RabbitMQ to accept the router's connection")
	first, err := dial(ctx)
	if err != nil {
		return false, caused(CauseBroker, err)
	}
	pub := &renewable{Publisher: first, dial: dial} // the snapshot's safety net may replace it
	defer func() {
		if !stop.closeWithin(pub) {
			log.Warn("the RabbitMQ connection did not close within the shutdown timeout; exiting without waiting for it")
		}
	}()
	start, err := p.execute(ctx, cfg, log, stats, conn, sql, store, sys, pub)
	if err != nil {
		return false, err
	}
	stats.waitFor("PostgreSQL at " + host + " to start replication")
	err = setupStep(ctx, cfg.PGTimeout, host, func(ctx context.Context) error {
		err := pglogrepl.StartReplication(ctx, conn, cfg.Slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{
			PluginArgs: pluginArgs(cfg),
		})
		if err != nil {
			return startError(err, cfg)
		}
		return nil
	})
	if err != nil {
		return false, err
	}
	*started = true
	prev, _, _ := stats.State()
	stats.setState(StateStreaming, nil)
	// previous says what this start follows: starting (the process's first), restarting (after a failure),
	// standby (this router took the slot over) or snapshot (the initial snapshot is done).
	log.Info("streaming", "lsn", start, "previous", prev, "publication", cfg.Publication, "system_id", sys.SystemID,
		"timeline", sys.Timeline)
	s := &session{ctx: ctx, stop: stop, cfg: cfg, log: log, conn: conn, sql: sql, store: store, tracker: offsets.NewTracker(start),
		pub: pub, dec: decode.New(cfg.Decode), sys: sys, stats: stats, live: newLiveness(cfg.PGTimeout, time.Now()),
		net: net, quar: quarantine.NewStore(sql, cfg.Schema, cfg.Slot), watch: watch,
		emitKeys: newEmitKeyWatch(cfg, log),
		progress: newProgressLog(log, stats, cfg.ProgressInterval), flight: newFlight(), pending: stats.takeCarried(start)}
	s.frames = newFrames(wire, s.dec.MessagePrefix(), s.dec.MessageLimit())
	stats.flight.Store(s.flight)
	defer stats.flight.Store(nil)
	watch.next = time.Now().Add(cfg.PublicationCheckInterval)
	net.received = 0
	s.markConfig = markConfig(cfg, resume.build)
	s.resumeAt = resume.choose(p.stored, p.hasStored, sys, s.markConfig, start)
	from := s.resumeAt
	err = stalled(s.stream(), host)
	s.flushBursts()
	m := s.mark()
	resume.record(m, s.markConfig, sys)
	stats.carry(s.pending, s.sent)
	// Progress inside a transaction counts: a long one cut again and again still moves, so the backoff
	// stays short.
	return s.tracker.Watermark() > start || m.Done > 0 && (m.Key != from.Key || m.Done > from.Done), err
}

// plan is what a run does before streaming, decided before anything is created or published.
type plan struct {
	decision startDecision
	jobs     []initialJob  // the initial snapshots to finish (resumed or never recorded), in --table order
	fresh    bool          // the slot exists with neither a stored position nor a snapshot record
	slot     SlotInfo      // the slot as found
	failover failoverCheck // what --failover-slot needs done
	timeline bool          // the stored position is of an earlier timeline of this cluster: record this one
	// stored is the stored position as loaded (hasStored: there is one), for the progress inside a
	// transaction it records.
	stored    offsets.Position
	hasStored bool
}

// planStart applies the refusal rules and decides whether a snapshot is needed.
func planStart(ctx context.Context, cfg Config, sql *pgx.Conn, store *offsets.Store,
	sys pglogrepl.IdentifySystemResult) (plan, error) {
	stored, hasStored, err := store.Load(ctx)
	if err != nil {
		return plan{}, err
	}
	slot, err := InspectSlot(ctx, sql, cfg.Slot)
	if err != nil {
		return plan{}, err
	}
	if slot.Active {
		// Checked before the broker is dialled, so that a standby waiting for a dead router's walsender stays
		// quiet; one that becomes active after this check meets 55006 at START_REPLICATION.
		return plan{}, busyError(cfg)
	}
	fc, err := checkFailover(ctx, cfg, sql, slot)
	if err != nil {
		return plan{}, err
	}
	d, err := decideStart(cfg, sys, slot, stored, hasStored)
	if err != nil {
		return plan{}, err
	}
	p := plan{decision: d, slot: slot, failover: fc, timeline: hasStored && stored.Timeline != sys.Timeline,
		stored: stored, hasStored: hasStored}
	if d.create {
		return p, nil
	}
	p.jobs, p.fresh, err = initialJobs(ctx, cfg, sql, d.start, hasStored)
	return p, err
}

// initialJobs finds the initial snapshots still to copy: the unfinished ones, or, for a slot with neither a
// stored position nor any snapshot record and --snapshot=initial, every table's (fresh). An unfinished one
// without --snapshot=initial, or of a table this run does not read, is refused: streaming on would never
// publish its rest.
func initialJobs(ctx context.Context, cfg Config, sql *pgx.Conn, start cdc.LSN, hasStored bool) ([]initialJob, bool, error) {
	all, err := snapshot.NewJobs(sql, cfg.Schema).All(ctx)
	if err != nil {
		return nil, false, err
	}
	byName := map[string]snapshot.Job{}
	for _, j := range all {
		if snapshot.IsInitialOf(j.Name, cfg.Slot) {
			byName[j.Name] = j
		}
	}
	recorded := len(byName) > 0
	var todo []initialJob
	for _, t := range cfg.outboxTables() {
		job, ok := byName[cfg.initialName(t)]
		delete(byName, cfg.initialName(t))
		switch {
		case ok && !job.Done() && cfg.Snapshot != "initial":
			what := "slot " + cfg.Slot
			if len(cfg.Decode.MoreTables) > 0 {
				what = t + " (slot " + cfg.Slot + ")"
			}
			return nil, false, fatalf("the initial snapshot of %s is unfinished (%d of %d rows): streaming now would never "+
				"publish the rest; start with --snapshot=initial to finish it, or run `cdc-router reset --slot %s` to start over",
				what, job.RowsDone, job.RowsTotal, cfg.Slot)
		case ok && !job.Done():
			todo = append(todo, initialJob{t, job})
		}
	}
	for name, job := range byName {
		if !job.Done() {
			return nil, false, fatalf("the initial snapshot %s of slot %s is unfinished (%d of %d rows) and belongs to an "+
				"outbox table list other than this run's --table: start with the --table it began with to finish it, or run "+
				"`cdc-router reset --slot %s` to start over", name, cfg.Slot, job.RowsDone, job.RowsTotal, cfg.Slot)
		}
	}
	if len(todo) > 0 || cfg.Snapshot != "initial" || hasStored || recorded {
		return todo, false, nil
	}
	for _, t := range cfg.outboxTables() {
		todo = append(todo, initialJob{t, snapshot.Job{Name: cfg.initialName(t), Kind: "initial",
			Predicate: cfg.SnapshotWhere, ReadLSN: start}})
	}
	return todo, true, nil
}

// execute creates the slot (with its snapshot) or finishes a snapshot, and returns the position to
// stream from.
func (p plan) execute(ctx context.Context, cfg Config, log *slog.Logger, stats *Stats, conn *pgconn.PgConn,
	sql *pgx.Conn, store *offsets.Store, sys pglogrepl.IdentifySystemResult, pub Publisher) (cdc.LSN, error) {
	pos := func(l cdc.LSN) offsets.Position {
		return offsets.Position{LSN: l, SystemID: sys.SystemID, Timeline: sys.Timeline}
	}
	err := setupStep(ctx, cfg.PGTimeout, pgHost(cfg.PGURL), func(ctx context.Context) error {
		if err := p.failover.apply(ctx, cfg, log, conn, p.slot); err != nil {
			return err
		}
		if p.timeline {
			if err := recordTimeline(ctx, cfg, sql, sys); err != nil {
				return err
			}
		}
		if p.decision.create && cfg.Snapshot == "initial" {
			return checkSnapshotTables(ctx, cfg, sql)
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	switch {
	case p.decision.create && cfg.Snapshot == "initial":
		return createWithSnapshot(ctx, cfg, log, stats, conn, sql, store, sys, pub)
	case p.decision.create:
		stop := watchCreation(ctx, cfg, log, stats)
		point, err := createSlot(ctx, conn, cfg.Slot, cfg.FailoverSlot)
		stop()
		if err != nil {
			return 0, err
		}
		log.Info("created replication slot without a snapshot (--snapshot=never)", "lsn", point)
		// Store the position at once: from now on a vanished slot is detected instead of silently replaced.
		return point, store.Save(ctx, pos(point), true)
	case len(p.jobs) > 0:
		for _, j := range p.jobs { // before a fresh job is recorded: the refusal's fix then works as it says
			if err := snapshot.CheckTable(ctx, cfg.forTable(j.table).snapshotConfig(), sql); err != nil {
				return 0, &Fatal{Msg: err.Error()}
			}
		}
		jobs := snapshot.NewJobs(sql, cfg.Schema)
		if p.fresh {
			log.Warn("the slot exists but no position or snapshot was ever recorded for it: copying the whole table once")
			err := pgx.BeginFunc(ctx, sql, func(t pgx.Tx) error {
				for _, j := range p.jobs {
					if err := jobs.Start(ctx, t, j.job); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				return 0, err
			}
			if err := store.Save(ctx, pos(p.decision.start), true); err != nil {
				return 0, err
			}
		}
		if err := resumeSnapshot(ctx, cfg, log, stats, sql, p.jobs, pub); err != nil {
			return 0, err
		}
	}
	return p.decision.start, nil
}

// startError classifies a failed START_REPLICATION.
func startError(err error, cfg Config) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "55006":
			return fmt.Errorf("%w: %w", busyError(cfg), err)
		case "22023":
			if cfg.Decode.MessagePrefix != "" && strings.Contains(pgErr.Message, "messages") {
				return fatalf("PostgreSQL refused pgoutput's messages option (%s): --message-prefix needs PostgreSQL 14 or later; "+
					"upgrade, or run without --message-prefix", pgErr.Message)
			}
			return streamError(pgErr, cfg)
		default:
			return streamError(pgErr, cfg)
		}
	}
	return fmt.Errorf("start replication: %w", err)
}

// busyError says that the slot is streamed by another process while this router holds the advisory lock.
func busyError(cfg Config) error {
	return fmt.Errorf("slot %s is in use by another process (the walsender of a router that just died, which "+
		"PostgreSQL ends when it finds the connection closed, or within wal_sender_timeout; or a consumer that "+
		"is not a router): %w", cfg.Slot, errSlotBusy)
}
