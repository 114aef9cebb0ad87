package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/admin"
	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/pubcheck"
	"github.com/cdc-router/cdc-router/replication"
	"github.com/cdc-router/cdc-router/route"
	"github.com/cdc-router/cdc-router/route/message"
)

// pgFlags are the PostgreSQL settings every command shares.
type pgFlags struct {
	url, slot, publication, schema *string
	tables                         *[]string // --table, each occurrence one table
}

func addPGFlags(s *settings) pgFlags {
	return pgFlags{
		url:         s.String("pg-url", "", "PostgreSQL URL, postgres://user:password@host:5432/db (replication=database is added for the stream)"),
		slot:        s.String("slot", "cdc_router", "logical replication slot"),
		publication: s.String("publication", "cdc_router_outbox", "publication of the outbox table"),
		tables:      s.Repeated("table", "public.outbox", "outbox table, schema.table; run reads several, the flag repeated (one publication, events in commit order across them)"),
		schema:      s.String("schema", "cdc_router", "schema of the router's own tables"),
	}
}

// table is the (first) outbox table of --table.
func (p pgFlags) table() string { return (*p.tables)[0] }

// oneTable refuses several --table values for a command that works on one outbox table.
func (p pgFlags) oneTable(command string) error {
	if t := *p.tables; len(t) > 1 {
		return usageError{fmt.Errorf("--table names %d tables (%s), but `cdc-router %s` works on one outbox table: "+
			"run it once per table", len(t), strings.Join(t, ", "), command)}
	}
	return nil
}

func (p pgFlags) migrations() migrations.Config {
	return migrations.Config{Table: p.table(), Publication: *p.publication, Schema: *p.schema}
}

// brokerFlags are the settings run and backfill share: where to publish, the row limit and the logs.
type brokerFlags struct {
	amqpURL, exchange, alternate *string
	unroutableQueueType          *string
	noAlternate                  *bool
	maxPayload, maxInflight      *int
	refusalRetry                 *time.Duration
	logLevel, logFormat          *string
}

func addBrokerFlags(s *settings) brokerFlags {
	return brokerFlags{
		amqpURL:             s.List("amqp-url", "amqp://guest:guest@localhost:5672/", "RabbitMQ URL, amqp://user:password@host:5672/vhost; for a cluster several, comma-separated or the flag repeated, tried in order (a lost node is tried last)"),
		exchange:            s.String("exchange", route.DefaultExchange, "durable topic exchange the events are published to"),
		alternate:           s.String("alternate-exchange", "", "alternate exchange and queue for unroutable events (default <exchange>.unroutable)"),
		unroutableQueueType: s.String("unroutable-queue-type", route.QueueTypeClassic, "classic or quorum: type of the alternate exchange's queue; use quorum with a RabbitMQ cluster, where a classic queue's node being down stops every declaration"),
		noAlternate:         s.Bool("no-alternate-exchange", false, "declare the exchange without an alternate exchange: an unroutable event is retried (and holds the position) until a binding matches it"),
		maxPayload:          s.Int("max-payload-bytes", 8<<20, "larger payloads are quarantined instead of published (keep it below the broker's max_message_size)"),
		maxInflight:         s.Int("max-inflight-bytes", route.DefaultMaxInflightBytes, "bytes of unconfirmed messages held at most, across all channels (bounds memory)"),
		refusalRetry: s.Duration("refusal-retry", cdc.DefaultRefusalRetry, "how long an event RabbitMQ returns (no binding on an "+
			"exchange of amqp.topic.target=exchange) or nacks (a queue with x-overflow=reject-publish refused it) is retried, alone "+
			"and with backoff, before it is quarantined (by quarantine replay: before its record is left open); the stream (or snapshot, or backfill) waits on it meanwhile, so choose "+
			"the longest a consumer may go without its queue bound (a restart with an auto-delete queue) or a full queue may take to drain"),
		logLevel:  s.String("log-level", "info", "debug, info, warn or error"),
		logFormat: s.String("log-format", "text", "text or json"),
	}
}

func (b brokerFlags) route(connectionName string) route.Config {
	return route.Config{URL: *b.amqpURL, Exchange: *b.exchange, AlternateExchange: *b.alternate,
		NoAlternateExchange: *b.noAlternate, ConnectionName: connectionName, MaxInflightBytes: *b.maxInflight,
		UnroutableQueueType: *b.unroutableQueueType}
}

func (b brokerFlags) decode(table string) decode.Config {
	return decode.Config{Table: table, MaxPayloadBytes: *b.maxPayload, Check: message.Check}
}

func (b brokerFlags) logger(stderr io.Writer) (*slog.Logger, error) {
	return newLogger(stderr, *b.logLevel, *b.logFormat)
}

// memoryHeadroom is what the process needs besides the messages in flight: the runtime, the decoder,
// the connections' buffers and one page of a snapshot.
const memoryHeadroom = 40 << 20

// limitMemory sets the Go runtime's soft memory limit to the in-flight byte bound plus headroom, unless
// GOMEMLIMIT is set. Without it the garbage collector lets the heap grow to twice what is live, so a full
// 64 MiB window would cost about 128 MiB of RSS. A single row larger than the limit still goes through:
// the limit is soft and the collector caps its own CPU share.
func (b brokerFlags) limitMemory(env func(string) string) {
	if env("GOMEMLIMIT") != "" {
		return
	}
	inflight := *b.maxInflight
	if inflight <= 0 {
		inflight = route.DefaultMaxInflightBytes
	}
	debug.SetMemoryLimit(int64(inflight) + memoryHeadroom)
}

func requireURL(p pgFlags) error {
	if *p.url == "" {
		return usageError{errors.New("no PostgreSQL URL: set --pg-url or CDC_ROUTER_PG_URL (postgres://user:password@host:5432/db)")}
	}
	return nil
}

// withConn parses a command's flags (the shared PostgreSQL ones plus those extra adds) and runs fn on an
// ordinary connection; except for migrate, only on a router schema of the version this binary knows.
func withConn(ctx context.Context, name string, args []string, env func(string) string, stderr io.Writer,
	extra func(*settings), fn func(conn *pgx.Conn, pg pgFlags) error) error {
	s := newSettings(name, env, stderr)
	pg := addPGFlags(s)
	if extra != nil {
		extra(s)
	}
	if err := parse(s, args); err != nil {
		return err
	}
	if err := requireURL(pg); err != nil {
		return err
	}
	if err := pg.oneTable(name); err != nil {
		return err
	}
	conn, err := pgserver.ConnectSQL(ctx, *pg.url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if name != "migrate" {
		if err := migrations.CheckSchemaVersion(ctx, conn, *pg.schema); err != nil {
			return err
		}
	}
	return fn(conn, pg)
}

func runMigrate(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	var withInbox, noAlternate, partitioned, emitFunction, rotateEmitKey *bool
	var emitRoles *[]string
	var inboxSchema, amqpURL, exchange, alternate, interval, unroutableQueueType, messagePrefix, mappingFile *string
	var ahead, shards *int
	flags := func(s *settings) {
		partitioned = s.Bool("partitioned", false, "create the outbox range-partitioned by occurred_at, with a default partition and the partitions "+
			"of the current and next intervals, published through its root; run again (daily) to add the coming partitions (docs/partitioning.md)")
		interval = s.String("partition-interval", "month", "with --partitioned: the span of each partition, day, week or month (UTC)")
		ahead = s.Int("partitions-ahead", 3, "with --partitioned: how many partitions to have after the current one")
		shards = s.Int("shards", 0, "also create the publications of this many shards (PostgreSQL 15+), <publication>_shard_<i>_of_<N>, each with a row filter on a hash of the aggregate; run each shard's router with --shard i/N")
		emitFunction = s.Bool("emit-function", false, "also create <schema>.emit(aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers, schema_version), which writes an event as a logical decoding message for run --message-prefix (PostgreSQL 14+)")
		messagePrefix = s.String("message-prefix", migrations.DefaultMessagePrefix, "the message prefix that --emit-function's function writes; give run the same --message-prefix")
		emitRoles = s.Repeated("emit-role", "", "with --emit-function: a role that may call <schema>.emit (EXECUTE is revoked from PUBLIC; roles granted by earlier runs keep it); repeat the flag for several")
		rotateEmitKey = s.Bool("rotate-emit-key", false, "with --emit-function: add a new key to sign emitted events with, from 2 minutes later on (running routers reload the keys before; docs/operations.md)")
		withInbox = s.Bool("inbox", false, "also create the consumer-side inbox tables (package inbox) in this database")
		inboxSchema = s.String("inbox-schema", inbox.DefaultSchema, "schema of the inbox tables")
		amqpURL = s.List("amqp-url", "", "also declare the exchange (and the alternate exchange and its queue) in RabbitMQ, as run does, so consumers can bind before the first run")
		exchange = s.String("exchange", route.DefaultExchange, "exchange to declare with --amqp-url")
		alternate = s.String("alternate-exchange", "", "alternate exchange and queue to declare with --amqp-url (default <exchange>.unroutable)")
		noAlternate = s.Bool("no-alternate-exchange", false, "declare the exchange without an alternate exchange, as run does with this flag")
		unroutableQueueType = s.String("unroutable-queue-type", route.QueueTypeClassic, "classic or quorum: type of the alternate exchange's queue to declare with --amqp-url, as run does with this flag")
		mappingFile = s.String("config", "", "the --config file run reads the table with: migrate then names the exchanges its topics route to (amqp.topic.target=exchange), which it does not declare; the file is checked as run checks it (off when empty)")
	}
	return withConn(ctx, "migrate", args, env, stderr, flags, func(conn *pgx.Conn, pg pgFlags) error {
		var mapped *decode.Mapping
		if *mappingFile != "" {
			mappings, err := loadMappings([]string{*mappingFile}, []string{pg.table()}, "")
			if err != nil {
				return err
			}
			mapped = mappings[decode.QualifiedTable(pg.table())]
		}
		byTopic := mapped != nil && mapped.TopicTarget == mapping.TargetExchange
		mcfg := pg.migrations()
		mcfg.Partitioned, mcfg.PartitionInterval, mcfg.PartitionsAhead = *partitioned, *interval, *ahead
		mcfg.EmitFunction, mcfg.MessagePrefix = *emitFunction, *messagePrefix
		mcfg.EmitRoles, mcfg.RotateEmitKey = *emitRoles, *rotateEmitKey
		if !*emitFunction && (len(*emitRoles) > 0 || *rotateEmitKey) {
			return usageError{errors.New("--emit-role and --rotate-emit-key set up <schema>.emit: add --emit-function")}
		}
		if err := migrations.Apply(ctx, conn, mcfg); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "migrated: table %s, publication %s, schema %s\n", pg.table(), *pg.publication, *pg.schema)
		warning, err := migrations.WALLevelWarning(ctx, conn)
		if err != nil {
			return err
		}
		if warning != "" {
			fmt.Fprintf(stderr, "cdc-router migrate: warning: %s\n", warning)
		}
		if *partitioned {
			fmt.Fprintf(stdout, "partitioned: %s by occurred_at, one partition per %s up to %d ahead, and a default partition\n",
				pg.table(), *interval, *ahead)
		}
		if *shards != 0 {
			if err := migrations.ApplyShards(ctx, conn, mcfg, *shards); err != nil {
				return err
			}
			fmt.Fprintf(stdout, "migrated: publications %s to %s; run each router with --shard i/%d\n",
				migrations.ShardPublication(*pg.publication, 0, *shards), migrations.ShardPublication(*pg.publication, *shards-1, *shards), *shards)
		}
		if *emitFunction {
			grantees, err := migrations.EmitGrantees(ctx, conn, *pg.schema)
			if err != nil {
				return err
			}
			if len(grantees) == 0 {
				grantees = []string{"no role yet (name the writers with --emit-role)"}
			}
			fmt.Fprintf(stdout, "migrated: function %s.emit, writing messages with prefix %q (run with --message-prefix %s), "+
				"signed with the newest key of %s.emit_keys, which the router's role must read (GRANT SELECT); EXECUTE for: %s\n",
				*pg.schema, *messagePrefix, *messagePrefix, *pg.schema, strings.Join(grantees, ", "))
		}
		if *amqpURL != "" {
			rcfg := route.Config{URL: *amqpURL, Exchange: *exchange, AlternateExchange: *alternate,
				NoAlternateExchange: *noAlternate, ConnectionName: "cdc-router migrate", UnroutableQueueType: *unroutableQueueType}
			if err := amqpTLSFiles(*amqpURL); err != nil {
				return err
			}
			if err := route.Declare(ctx, rcfg); err != nil {
				return brokerError(err)
			}
			fmt.Fprintln(stdout, declaredLine(rcfg, !byTopic))
		}
		if byTopic {
			fmt.Fprintln(stdout, topicExchangesLine(decode.QualifiedTable(pg.table()), mapped))
		}
		if !*withInbox {
			return nil
		}
		if err := inbox.MigrateSchema(ctx, conn, *inboxSchema); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "migrated: inbox schema %s\n", *inboxSchema)
		return nil
	})
}

// shardFlag is the --shard of status and reset: I/N as run takes it, or I alone when one count of shards exists.
const shardFlag = "I/N or I: the shard I of N (migrate --shards N), whose slot is <slot>_shard_I_of_N and publication <publication>_shard_I_of_N, as run --shard I/N; I alone when the database has one count of shards"

// resolveShard points pg at the shard that value names (slot and publication), or, when value is empty,
// returns the shards the database has. A shard that does not exist is refused naming those that do.
func resolveShard(ctx context.Context, conn *pgx.Conn, pg pgFlags, value string) (*admin.Shard, []admin.Shard, error) {
	found, err := admin.Shards(ctx, conn, *pg.slot, *pg.publication)
	if err != nil || value == "" {
		return nil, found, err
	}
	shard, err := admin.ResolveShard(value, found, *pg.slot, *pg.publication)
	if err != nil {
		return nil, nil, usageError{err}
	}
	*pg.slot, *pg.publication = shard.Slot, shard.Publication
	return &shard, nil, nil
}

func runStatus(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	var asJSON *bool
	var messagePrefix, shardValue *string
	flags := func(s *settings) {
		asJSON = s.Bool("json", false, "print the report as one JSON object (the stable schema in docs/operations.md) instead of text")
		messagePrefix = s.String("message-prefix", "", "the --message-prefix the router runs with, so that the logical decoding messages waiting in a stopped router's slot are counted too")
		shardValue = s.String("shard", "", shardFlag+"; without it, status lists the shards after the unsharded slot's report")
	}
	return withConn(ctx, "status", args, env, stderr, flags, func(conn *pgx.Conn, pg pgFlags) error {
		shard, found, err := resolveShard(ctx, conn, pg, *shardValue)
		if err != nil {
			return err
		}
		r, err := admin.Status(ctx, conn, *pg.slot, *pg.schema)
		if err != nil {
			return err
		}
		r.Publication, r.Shard = *pg.publication, shard
		admin.CountPending(ctx, conn, &r, admin.ResetOptions{Publication: *pg.publication, MessagePrefix: *messagePrefix})
		if r.Shards, err = admin.StatusOfShards(ctx, conn, found, *pg.schema, *messagePrefix); err != nil {
			return err
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(r)
		}
		fmt.Fprint(stdout, r)
		return nil
	})
}

func runReset(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	var force *bool
	var shard, messagePrefix *string
	var peekLimit *int
	var peekTimeout *time.Duration
	flags := func(s *settings) {
		force = s.Bool("force", false, "drop the slot even when it still holds unpublished events (reset names how many), or when they cannot be counted")
		shard = s.String("shard", "", shardFlag+"; reset resets that shard's slot only, counting its unpublished events with its publication")
		messagePrefix = s.String("message-prefix", "", "the --message-prefix the router runs with, so that the logical decoding messages it would publish are counted too")
		peekLimit = s.Int("peek-limit", admin.DefaultPeekLimit, "decode at most this many of the slot's pending changes to count the unpublished events (past it: \"at least\")")
		peekTimeout = s.Duration("peek-timeout", admin.DefaultPeekTimeout, "bound on the time spent counting the slot's unpublished events")
	}
	return withConn(ctx, "reset", args, env, stderr, flags, func(conn *pgx.Conn, pg pgFlags) error {
		if *shard != "" {
			if _, _, err := resolveShard(ctx, conn, pg, *shard); err != nil {
				return err
			}
		}
		dropped, err := admin.Reset(ctx, conn, *pg.slot, *pg.schema, admin.ResetOptions{Publication: *pg.publication,
			MessagePrefix: *messagePrefix, Force: *force, PeekLimit: *peekLimit, PeekTimeout: *peekTimeout})
		if err != nil {
			return err
		}
		switch {
		case dropped.NotCounted != "":
			fmt.Fprintf(stdout, "reset --force: the slot's pending changes were not counted (%s)\n", dropped.NotCounted)
		case dropped.Events() > 0:
			fmt.Fprintf(stdout, "reset --force: dropped %s\n", dropped)
		}
		fmt.Fprintf(stdout, "reset: slot %s dropped (if it existed) and its stored position forgotten; the next run "+
			"creates a new slot\n", *pg.slot)
		return nil
	})
}

func runRun(ctx context.Context, args []string, env func(string) string, stdout, stderr io.Writer) error {
	s := newSettings("run", env, stderr)
	pg := addPGFlags(s)
	broker := addBrokerFlags(s)
	lanes := s.Int("lanes", route.DefaultLanes, "confirm-mode channels; an aggregate always uses the same one")
	window := s.Int("window", route.DefaultWindow, "unconfirmed messages allowed per channel")
	aggWindow := s.Int("aggregate-window", route.DefaultAggregateWindow, "unconfirmed events allowed per aggregate: 1 keeps an aggregate's first deliveries in commit order even when the broker refuses one (a nack, a return); more pipelines a hot aggregate (faster bulk runs of one aggregate), at the cost that after a refusal up to N-1 later events of it may arrive before the refused one (see docs/operations.md, Hot aggregates)")
	confirmTimeout := s.Duration("confirm-timeout", route.DefaultConfirmTimeout, "a message unconfirmed for this long restarts the stream from the acknowledged position (raise it if broker alarms last longer)")
	snap := s.String("snapshot", "initial", "initial: a new slot first publishes the rows already in the table, read in the slot's own snapshot; never: stream only")
	snapWhere := s.String("snapshot-where", "", "SQL predicate restricting the initial snapshot, e.g. \"published_at IS NULL\" when taking over from a polling publisher")
	shutdown := s.Duration("shutdown-timeout", 30*time.Second, "bound on the whole stop: finishing the open transaction and waiting for confirms (also those of the initial snapshot, whose progress is stored within it) and any wait on PostgreSQL")
	pgTimeout := s.Duration("pg-timeout", pgserver.DefaultPGTimeout, "bound on waiting for a PostgreSQL that accepts TCP but does not answer: each connection attempt (a shorter connect_timeout in --pg-url wins), the start-up checks, and the stream's silence (after half of it a status update asks for a reply); then the router restarts (cause postgres)")
	httpAddr := s.String("http-addr", "", "serve /healthz, /readyz and /metrics on this address, e.g. :8080 (off when empty)")
	progress := s.Duration("progress-interval", metrics.DefaultProgressInterval, "how often to log, at info level, how many events were published and quarantined since the last such line (nothing when nothing moved)")
	pubCheck := s.Duration("publication-check-interval", pubcheck.DefaultPublicationCheckInterval, "how often to re-check that the publication still carries the outbox table's inserts")
	failoverSlot := s.Bool("failover-slot", false, "create the slot with FAILOVER (PostgreSQL 17+; enabled on an existing slot too) so that a standby with sync_replication_slots = on keeps it and the router continues on the promoted standby; list every server in --pg-url with target_session_attrs=primary")
	minSafeWAL := s.Int("min-safe-wal-bytes", 0, "/readyz fails while the slot's safe_wal_size (WAL left before PostgreSQL invalidates it) is below this many bytes; 0: a tenth of max_slot_wal_keep_size; -1: off")
	shard := s.String("shard", "", "i/N: run as shard i (0 to N-1) of N, with the publication <publication>_shard_i_of_N that migrate --shards N created and the slot <slot>_shard_i_of_N (PostgreSQL 15+)")
	messagePrefix := s.String("message-prefix", "", "also publish the events that transactions emit with pg_logical_emit_message(true, <this prefix>, <envelope>), e.g. cdc-router.outbox (PostgreSQL 14+; off when empty; see docs/producers.md)")
	mappingFiles := s.Repeated("config", "", "read the outbox table in another shape: a Java-properties file with Debezium's outbox router options (table.field.event.id, route.by.field, ...) and amqp.* options; with several --table, one file per mapped table, the flag repeated, each naming its table with table=schema.table; see docs/migrating-from-polling.md (off when empty: the native shape)")
	onDrift := s.String("on-drift", "refuse", "when the outbox table's shape changes under the stream, or another table's rows arrive: refuse (stop before the first affected row) or quarantine (quarantine those rows and go on)")
	if err := parse(s, args); err != nil {
		return err
	}
	if err := requireURL(pg); err != nil {
		return err
	}
	if *shard != "" && *messagePrefix != "" {
		return usageError{fmt.Errorf("--message-prefix cannot be combined with --shard: PostgreSQL sends every logical " +
			"decoding message to every shard's slot (row filters do not apply to messages), so each shard's router would " +
			"publish every emitted event; with shards, write the events as outbox rows")}
	}
	if *shard != "" {
		i, n, err := migrations.ParseShard(*shard)
		if err != nil {
			return usageError{err}
		}
		*pg.publication, *pg.slot = migrations.ShardPublication(*pg.publication, i, n), migrations.ShardSlot(*pg.slot, i, n)
		// The initial snapshot reads the table, not the publication: it takes the shard's rows only.
		*snapWhere = migrations.ShardSnapshotWhere(*snapWhere, i, n)
	} else if i, n, ok := migrations.ShardOf(*pg.publication); ok {
		return usageError{fmt.Errorf("--publication %s is the publication of shard %d of %d, and without --shard this router "+
			"would publish only that shard's events: run with --shard %d/%d and --publication set to the base name "+
			"(the default cdc_router_outbox), or point --publication at the unfiltered publication", *pg.publication, i, n, i, n)}
	}
	tables := *pg.tables
	mappings, err := loadMappings(*mappingFiles, tables, *shard)
	if err != nil {
		return err
	}
	if len(tables) > 1 && *shard != "" {
		return usageError{fmt.Errorf("--table names %d tables, which cannot be combined with --shard: a shard's "+
			"publication filters one table; run one router per table", len(tables))}
	}
	log, err := broker.logger(stderr)
	if err != nil {
		return err
	}
	broker.limitMemory(env)
	stats := &metrics.Stats{}
	reg, routeMetrics, err := newRegistry(stats)
	if err != nil {
		return err
	}
	if *httpAddr != "" {
		if err := serveHTTP(ctx, *httpAddr, handler(stats, reg, int64(*minSafeWAL), brokerProblem(routeMetrics)), "/healthz, /readyz and /metrics", log); err != nil {
			return usageError{err}
		}
	}
	// route.Config takes 0 for its default; on the command line 0 is outside the documented range.
	for _, f := range []struct {
		name  string
		value int
	}{{"lanes", *lanes}, {"window", *window}, {"aggregate-window", *aggWindow}} {
		if f.value < 1 {
			return usageError{fmt.Errorf("--%s %d (%s): use 1 or more", f.name, f.value, envName(f.name))}
		}
	}
	if err := amqpTLSFiles(*broker.amqpURL); err != nil {
		return err
	}
	rcfg := broker.route("cdc-router")
	rcfg.Lanes, rcfg.Window, rcfg.ConfirmTimeout, rcfg.AggregateWindow = *lanes, *window, *confirmTimeout, *aggWindow
	rcfg.Metrics = routeMetrics
	if err := rcfg.Validate(); err != nil {
		return usageError{err}
	}
	cfg := replication.Config{PGURL: *pg.url, Slot: *pg.slot, Publication: *pg.publication, Table: tables[0],
		Schema: *pg.schema, ShutdownTimeout: *shutdown, Snapshot: *snap, SnapshotWhere: *snapWhere, Progress: terminal(stderr),
		Decode: broker.decode(tables[0])}
	cfg.Decode.OnDrift = *onDrift
	cfg.Decode.MessagePrefix = *messagePrefix
	cfg.Decode.Mapping = mappings[decode.QualifiedTable(tables[0])]
	for _, t := range tables[1:] {
		cfg.Decode.MoreTables = append(cfg.Decode.MoreTables, decode.Outbox{Table: t, Mapping: mappings[decode.QualifiedTable(t)]})
	}
	cfg.PublicationCheckInterval = *pubCheck
	cfg.ProgressInterval = *progress
	cfg.FailoverSlot = *failoverSlot
	cfg.RefusalRetry = *broker.refusalRetry
	cfg.PGTimeout = *pgTimeout
	dialer := route.NewDialer(rcfg, log)
	dial := func(ctx context.Context) (replication.Publisher, error) {
		r, err := dialer.Dial(ctx)
		if err != nil {
			return nil, brokerError(err)
		}
		return r, nil
	}
	cfg.StandbyProbe = func(ctx context.Context) error { // a standby shows a broker it could not publish to
		if err := dialer.Probe(ctx); err != nil {
			return brokerError(err)
		}
		return nil
	}
	if err := cfg.WithDefaults().Validate(); err != nil {
		return usageError{err}
	}
	toExchange, byTopic := destinations(tables, mappings, *messagePrefix)
	log.Info("starting", append(append([]any{"version", version}, startAttrs(*broker.exchange, toExchange, byTopic)...),
		"table", strings.Join(*pg.tables, ", "), "publication", *pg.publication, "slot", *pg.slot)...)
	if !toExchange {
		log.Info("no table publishes to --exchange: the events go to the exchanges their topics name (amqp.topic.target=exchange), "+
			"each logged when first found; --exchange is still declared, for a topic that names it", "exchange", *broker.exchange)
	}
	err = replication.Run(ctx, cfg, dial, log, stats)
	if err != nil {
		// A refusal or a failure the router does not retry needs a human: one ERROR line for log-based
		// alerts (cli prints the same reason as the exit message).
		log.Error("exiting: the router does not retry this", "error", err)
	}
	return err
}

// loadMappings reads the --config files of run (or backfill) into the mapping of each table they name (by
// decode.QualifiedTable): a file without a table= line maps the only table of --table. A table named
// twice, or not in --table, is refused.
func loadMappings(paths, tables []string, shard string) (map[string]*decode.Mapping, error) {
	out := map[string]*decode.Mapping{}
	files := map[string]string{}
	for _, path := range paths {
		m, err := loadMapping(path, shard)
		if err != nil {
			return nil, err
		}
		table := m.Table
		switch {
		case table == "" && len(tables) > 1:
			return nil, usageError{fmt.Errorf("--config %s names no table, and --table names %d: add a line "+
				"table=<schema.table> naming the table the file maps", path, len(tables))}
		case table == "":
			table = decode.QualifiedTable(tables[0])
		case !slices.ContainsFunc(tables, func(t string) bool { return decode.QualifiedTable(t) == table }):
			return nil, usageError{fmt.Errorf("--config %s maps table %s, which --table does not name: add it to "+
				"--table, or correct the file's table= line", path, table)}
		}
		if other, dup := files[table]; dup {
			return nil, usageError{fmt.Errorf("--config %s and %s both map table %s: keep one", other, path, table)}
		}
		files[table], out[table] = path, m
	}
	return out, nil
}

// loadMapping reads one of the --config files of run or backfill and refuses the settings a mapped table
// cannot have: shards split the native shape's aggregate columns.
func loadMapping(path, shard string) (*decode.Mapping, error) {
	m, err := mapping.LoadMapping(path)
	if err != nil {
		return nil, usageError{err}
	}
	for _, h := range m.HeaderNames() {
		if err := message.CheckHeaderName(h[0]); err != nil {
			return nil, usageError{fmt.Errorf("--config %s: %s: %w; choose another name", path, h[1], err)}
		}
	}
	if shard != "" {
		return nil, usageError{fmt.Errorf("--config %s cannot be combined with --shard: shards split the native shape's "+
			"aggregate columns; run one router for a mapped table", path)}
	}
	return m, nil
}
