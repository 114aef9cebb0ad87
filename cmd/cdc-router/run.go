package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/pubcheck"
	"github.com/cdc-router/cdc-router/replication"
	"github.com/cdc-router/cdc-router/route"
)

// runFlags are the settings of `run`: every key a configuration file may hold.
type runFlags struct {
	pg                                   pgFlags
	broker                               brokerFlags
	lanes, window, aggWindow, minSafeWAL *int
	confirmTimeout, shutdown, pgTimeout  *time.Duration
	progress, pubCheck, lease            *time.Duration
	snap, snapWhere, httpAddr, shard     *string
	messagePrefix, onDrift               *string
	failoverSlot, adaptiveWindow         *bool
	mappingFiles                         *[]string
}

func addRunFlags(s *settings) runFlags {
	s.manyTables = true
	return runFlags{
		pg:             addPGFlags(s),
		broker:         addBrokerFlags(s),
		lanes:          s.Int("lanes", route.DefaultLanes, "confirm-mode channels; an aggregate always uses the same one"),
		window:         s.Int("window", route.DefaultWindow, "unconfirmed messages allowed per channel (the most, with --adaptive-window)"),
		adaptiveWindow: s.Bool("adaptive-window", false, "adapt each channel's limit of unconfirmed messages to the confirm round trip, up to --window (as many as keep the broker busy without a backlog in its queues; being measured, see docs/benchmarks.md); false: --window fixed"),
		aggWindow:      s.Int("aggregate-window", route.DefaultAggregateWindow, "unconfirmed events allowed per aggregate: 1 keeps an aggregate's first deliveries in commit order even when the broker refuses one (a nack, a return); more pipelines a hot aggregate (faster bulk runs of one aggregate), at the cost that after a refusal up to N-1 later events of it may arrive before the refused one (see docs/howto/tune-throughput.md#hot-aggregates)"),
		confirmTimeout: s.Duration("confirm-timeout", route.DefaultConfirmTimeout, "a message unconfirmed for this long restarts the stream from the acknowledged position (raise it if broker alarms last longer)"),
		snap:           s.String("snapshot", "initial", "initial: a new slot first publishes the rows already in the table, read in the slot's own snapshot; never: stream only"),
		snapWhere:      s.String("snapshot-where", "", "SQL predicate restricting the initial snapshot, e.g. \"published_at IS NULL\" when taking over from a polling publisher"),
		shutdown:       s.Duration("shutdown-timeout", 30*time.Second, "bound on the whole stop: finishing the open transaction and waiting for confirms (also those of the initial snapshot, whose progress is stored within it) and any wait on PostgreSQL"),
		pgTimeout:      s.Duration("pg-timeout", pgserver.DefaultPGTimeout, "bound on waiting for a PostgreSQL that accepts TCP but does not answer: each connection attempt (a shorter connect_timeout in --pg-url wins), the start-up checks, and the stream's silence (after half of it a status update asks for a reply); then the router restarts (cause postgres)"),
		lease:          s.Duration("lease", replication.DefaultLease, "bound on how long a router that stops answering (a paused or wedged process, a stalled virtual machine, a host gone while its kernel still answers TCP) keeps its slot: PostgreSQL ends the session that holds the slot's lock this long after the router's last word (the router sets wal_sender_timeout to it on its replication connection), and a router held up or silent for part of it stops writing to RabbitMQ until it takes the slot again; the router standing by takes over within it and a second; 0: off (see docs/howto/run-two-routers.md#a-router-that-stops-answering-the-lease)"),
		httpAddr:       s.String("http-addr", "", "serve /healthz, /readyz and /metrics on this address, e.g. :8080 (off when empty)"),
		progress:       s.Duration("progress-interval", metrics.DefaultProgressInterval, "how often to log, at info level, how many events were published and quarantined since the last such line (nothing when nothing moved)"),
		pubCheck:       s.Duration("publication-check-interval", pubcheck.DefaultPublicationCheckInterval, "how often to re-check that the publication still carries the outbox table's inserts"),
		failoverSlot:   s.Bool("failover-slot", false, "create the slot with FAILOVER (PostgreSQL 17+; enabled on an existing slot too) so that a standby with sync_replication_slots = on keeps it and the router continues on the promoted standby; list every server in --pg-url with target_session_attrs=primary"),
		minSafeWAL:     s.Int("min-safe-wal-bytes", 0, "/readyz fails while the slot's safe_wal_size (WAL left before PostgreSQL invalidates it) is below this many bytes; 0: a tenth of max_slot_wal_keep_size; -1: off"),
		shard:          s.String("shard", "", "i/N: run as shard i (0 to N-1) of N, with the publication <publication>_shard_i_of_N that migrate --shards N created and the slot <slot>_shard_i_of_N (PostgreSQL 15+)"),
		messagePrefix:  s.String("message-prefix", "", "also publish the events that transactions emit with pg_logical_emit_message(true, <this prefix>, <envelope>), e.g. cdc-router.outbox (PostgreSQL 14+; off when empty; see docs/producers.md)"),
		mappingFiles:   s.Repeated("config", "", "read the outbox table in another shape: a Java-properties file with Debezium's outbox router options (table.field.event.id, route.by.field, ...) and amqp.* options; with several --table, one file per mapped table, the flag repeated, each naming its table with table=schema.table; in a configuration file, the key mapping; see docs/migrating-from-polling.md (off when empty: the native shape)"),
		onDrift:        s.String("on-drift", "refuse", "when the outbox table's shape changes under the stream, or another table's rows arrive: refuse (stop before the first affected row) or quarantine (quarantine those rows and go on)"),
	}
}

// router is what run starts with, built from its flags by runFlags.router: the stream's and the broker's
// configurations and the tables' mappings.
type router struct {
	cfg      replication.Config
	rcfg     route.Config
	mappings map[string]*decode.Mapping
	shard    string // i/N, or empty
}

// router checks the flags against each other and builds the configurations run starts with. The shard's
// slot and publication replace the base names in f.pg.
func (f runFlags) router(stderr io.Writer) (router, error) {
	pg := f.pg
	if err := requireURL(pg); err != nil {
		return router{}, err
	}
	if *f.shard != "" && *f.messagePrefix != "" {
		return router{}, usageError{fmt.Errorf("--message-prefix cannot be combined with --shard: PostgreSQL sends every logical " +
			"decoding message to every shard's slot (row filters do not apply to messages), so each shard's router would " +
			"publish every emitted event; with shards, write the events as outbox rows")}
	}
	snapWhere := *f.snapWhere
	if *f.shard != "" {
		i, n, err := migrations.ParseShard(*f.shard)
		if err != nil {
			return router{}, usageError{err}
		}
		*pg.publication, *pg.slot = migrations.ShardPublication(*pg.publication, i, n), migrations.ShardSlot(*pg.slot, i, n)
		// The initial snapshot reads the table, not the publication: it takes the shard's rows only.
		snapWhere = migrations.ShardSnapshotWhere(snapWhere, i, n)
	} else if i, n, ok := migrations.ShardOf(*pg.publication); ok {
		return router{}, usageError{fmt.Errorf("--publication %s is the publication of shard %d of %d, and without --shard this router "+
			"would publish only that shard's events: run with --shard %d/%d and --publication set to the base name "+
			"(the default cdc_router_outbox), or point --publication at the unfiltered publication", *pg.publication, i, n, i, n)}
	}
	tables := *pg.tables
	mappings, err := loadMappings(*f.mappingFiles, tables, *f.shard)
	if err != nil {
		return router{}, err
	}
	if len(tables) > 1 && *f.shard != "" {
		return router{}, usageError{fmt.Errorf("--table names %d tables, which cannot be combined with --shard: a shard's "+
			"publication filters one table; run one router per table", len(tables))}
	}
	// route.Config takes 0 for its default; on the command line 0 is outside the documented range.
	for _, v := range []struct {
		name  string
		value int
	}{{"lanes", *f.lanes}, {"window", *f.window}, {"aggregate-window", *f.aggWindow}} {
		if v.value < 1 {
			return router{}, usageError{fmt.Errorf("--%s %d (%s): use 1 or more", v.name, v.value, envName(v.name))}
		}
	}
	if err := amqpTLSFiles(*f.broker.amqpURL); err != nil {
		return router{}, err
	}
	rcfg := f.broker.route(connectionName("cdc-router", *pg.slot))
	rcfg.Lanes, rcfg.Window, rcfg.ConfirmTimeout, rcfg.AggregateWindow = *f.lanes, *f.window, *f.confirmTimeout, *f.aggWindow
	rcfg.AdaptiveWindow = *f.adaptiveWindow
	if err := rcfg.Validate(); err != nil {
		return router{}, usageError{err}
	}
	cfg := replication.Config{PGURL: *pg.url, Slot: *pg.slot, Publication: *pg.publication, Table: tables[0],
		Schema: *pg.schema, ShutdownTimeout: *f.shutdown, Snapshot: *f.snap, SnapshotWhere: snapWhere, Progress: terminal(stderr),
		Decode: f.broker.decode(tables[0])}
	cfg.Decode.OnDrift = *f.onDrift
	cfg.Decode.MessagePrefix = *f.messagePrefix
	cfg.Decode.Mapping = mappings[decode.QualifiedTable(tables[0])]
	for _, t := range tables[1:] {
		cfg.Decode.MoreTables = append(cfg.Decode.MoreTables, decode.Outbox{Table: t, Mapping: mappings[decode.QualifiedTable(t)]})
	}
	cfg.PublicationCheckInterval = *f.pubCheck
	cfg.ProgressInterval = *f.progress
	cfg.FailoverSlot = *f.failoverSlot
	cfg.RefusalRetry = *f.broker.refusalRetry
	cfg.PGTimeout = *f.pgTimeout
	if *f.lease < 0 {
		return router{}, usageError{fmt.Errorf("--lease %v (%s): use a positive duration, or 0 to turn it off", *f.lease, envName("lease"))}
	}
	if cfg.Fence = replication.NewFence(*f.lease); cfg.Fence != nil {
		rcfg.Fence = cfg.Fence // the publisher writes only while the run holds the slot (replication.Fence)
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return router{}, usageError{err}
	}
	return router{cfg: cfg, rcfg: rcfg, mappings: mappings, shard: *f.shard}, nil
}

// connectionName is the name a command gives its AMQP connection (rabbitmqctl list_connections
// client_properties, the management UI): the command and the slot, so that several routers of one vhost
// can be told apart.
func connectionName(command, slot string) string {
	return command + " " + slot
}

func runRun(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	s := newSettings("run", env, stderr)
	f := addRunFlags(s)
	if err := parse(s, args); err != nil {
		return err
	}
	r, err := f.router(stderr)
	if err != nil {
		return err
	}
	log, err := f.broker.logger(stderr)
	if err != nil {
		return err
	}
	f.broker.limitMemory(env)
	stats := &metrics.Stats{}
	reg, routeMetrics, err := newRegistry(stats)
	if err != nil {
		return err
	}
	if *f.httpAddr != "" {
		if err := serveHTTP(ctx, *f.httpAddr, handler(stats, reg, int64(*f.minSafeWAL), brokerProblem(routeMetrics)), "/healthz, /readyz and /metrics", log); err != nil {
			return usageError{err}
		}
	}
	r.rcfg.Metrics = routeMetrics
	dialer := route.NewDialer(r.rcfg, log)
	dial := func(ctx context.Context) (replication.Publisher, error) {
		p, err := dialer.Dial(ctx)
		if err != nil {
			return nil, brokerError(err)
		}
		return p, nil
	}
	r.cfg.StandbyProbe = func(ctx context.Context) error { // a standby shows a broker it could not publish to
		if err := dialer.Probe(ctx); err != nil {
			return brokerError(err)
		}
		return nil
	}
	tables := *f.pg.tables
	toExchange, byTopic := destinations(tables, r.mappings, *f.messagePrefix)
	log.Info("starting", append(append([]any{"version", version}, startAttrs(*f.broker.exchange, toExchange, byTopic)...),
		"table", strings.Join(tables, ", "), "publication", r.cfg.Publication, "slot", r.cfg.Slot)...)
	if !toExchange {
		log.Info("no table publishes to --exchange: the events go to the exchanges their topics name (amqp.topic.target=exchange), "+
			"each logged when first found; --exchange is still declared, for a topic that names it", "exchange", *f.broker.exchange)
	}
	kept := keepRecord(ctx, s, f, r, stats, log)
	err = replication.Run(ctx, r.cfg, dial, log, stats)
	if err != nil {
		// A refusal or a failure the router does not retry needs a human: one ERROR line for log-based
		// alerts (cli prints the same reason as the exit message).
		log.Error("exiting: the router does not retry this", "error", err)
	}
	kept(err)
	return err
}
