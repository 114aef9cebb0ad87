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
	"github.com/cdc-router/cdc-router/migrations"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/registry"
	"github.com/cdc-router/cdc-router/route"
	"github.com/cdc-router/cdc-router/route/message"
)

// pgFlags are the PostgreSQL settings every command shares.
type pgFlags struct {
	url, slot, publication, schema *string
	tables                         *[]string // --table, each occurrence one table
	set                            *settings // where each came from (fromRecord)
}

func addPGFlags(s *settings) pgFlags {
	return pgFlags{
		url:         s.String("pg-url", "", "PostgreSQL URL, postgres://user:password@host:5432/db (replication=database is added for the stream)"),
		slot:        s.String("slot", "cdc_router", "logical replication slot"),
		publication: s.String("publication", "cdc_router_outbox", "publication of the outbox table"),
		tables:      s.Repeated("table", "public.outbox", "outbox table, schema.table; run reads several, the flag repeated (one publication, events in commit order across them)"),
		schema:      s.String("schema", "cdc_router", "schema of the router's own tables"),
		set:         s,
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
	var withInbox, noAlternate, partitioned, emitFunction, rotateEmitKey, retireEmitKeys *bool
	var retireWait *time.Duration
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
		rotateEmitKey = s.Bool("rotate-emit-key", false, "with --emit-function: add a new key to sign emitted events with, from 2 minutes later on (running routers reload the keys before; docs/howto/rotate-emit-keys.md#rotate-the-key)")
		retireEmitKeys = s.Bool("retire-emit-keys", false, "with --emit-function: retire every key older than the newest: it stops signing, routers verify with it for 24 h more, then migrate deletes it; refused while the newest key does not sign yet or a transaction of this database that began before it is open or prepared (docs/howto/rotate-emit-keys.md#retire-old-keys)")
		retireWait = s.Duration("wait", 0, "with --retire-emit-keys: how long to wait for what refuses the retirement (the newest key's not_before, open and prepared transactions) to pass; 0 refuses at once")
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
		if !*emitFunction && (len(*emitRoles) > 0 || *rotateEmitKey || *retireEmitKeys) {
			return usageError{errors.New("--emit-role, --rotate-emit-key and --retire-emit-keys set up <schema>.emit: add --emit-function")}
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
			if err := migrateEmitKeys(ctx, conn, *pg.schema, *retireEmitKeys, *retireWait, stdout, stderr); err != nil {
				return err
			}
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

// router settles the slot an operator command works on (slotOf, the shard of --shard) and takes the
// publication and the settings of fill from its router's record (fromRecord).
// With shard (--shard), the slot is that shard's, and the shards found are nil; without, they are the
// database's shards.
func (pg pgFlags) router(ctx context.Context, conn *pgx.Conn, shard string, fill ...recorded) (*admin.Shard, []admin.Shard, error) {
	recs, err := registry.List(ctx, conn, *pg.schema)
	if err != nil {
		return nil, nil, err
	}
	if shard == "" {
		if err := slotOf(pg.set, pg.slot, recs); err != nil {
			return nil, nil, err
		}
	}
	sh, found, err := resolveShard(ctx, conn, pg, shard)
	if err != nil {
		return nil, nil, err
	}
	fill = append(fill, recorded{"publication", pg.publication, publicationOf})
	_, _, err = fromRecord(ctx, conn, pg.set, *pg.schema, *pg.slot, fill...)
	return sh, found, err
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
		asJSON = s.Bool("json", false, "print the report as one JSON object (the stable schema in docs/reference.md#status---json) instead of text")
		messagePrefix = s.String("message-prefix", "", "the --message-prefix the router runs with, so that the logical decoding messages waiting in a stopped router's slot are counted too")
		shardValue = s.String("shard", "", shardFlag+"; without it, status lists the shards after the unsharded slot's report")
	}
	return withConn(ctx, "status", args, env, stderr, flags, func(conn *pgx.Conn, pg pgFlags) error {
		if listed, err := statusOfFleet(ctx, conn, pg, *shardValue, *asJSON, stdout); listed || err != nil {
			return err
		}
		shard, found, err := pg.router(ctx, conn, *shardValue, recorded{"message-prefix", messagePrefix, messagePrefixOf})
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
	var force, ignoreInFlight *bool
	var shard, messagePrefix *string
	var peekLimit *int
	var peekTimeout, wait *time.Duration
	flags := func(s *settings) {
		force = s.Bool("force", false, "drop the slot even when it still holds unpublished events (reset names how many), or when they cannot be counted; transactions still in flight are refused even so (see --ignore-in-flight)")
		wait = s.Duration("wait", admin.DefaultInFlightWait, "how long reset waits for this database's transactions that are open (holding a transaction ID) or prepared to end before it counts the slot's events; past it, it refuses naming them (0: no wait)")
		ignoreInFlight = s.Bool("ignore-in-flight", false, "drop the slot even when transactions that may still write into it are open or prepared after --wait: their events will never be published")
		shard = s.String("shard", "", shardFlag+"; reset resets that shard's slot only, counting its unpublished events with its publication")
		messagePrefix = s.String("message-prefix", "", "the --message-prefix the router runs with, so that the logical decoding messages it would publish are counted too")
		peekLimit = s.Int("peek-limit", admin.DefaultPeekLimit, "decode at most this many of the slot's pending changes to count the unpublished events (past it: \"at least\")")
		peekTimeout = s.Duration("peek-timeout", admin.DefaultPeekTimeout, "bound on the time spent counting the slot's unpublished events")
	}
	return withConn(ctx, "reset", args, env, stderr, flags, func(conn *pgx.Conn, pg pgFlags) error {
		if _, _, err := pg.router(ctx, conn, *shard, recorded{"message-prefix", messagePrefix, messagePrefixOf}); err != nil {
			return err
		}
		onWait := func(ts []admin.InFlight) {
			fmt.Fprintf(stderr, "cdc-router reset: waiting up to %v (--wait) for %d transactions of this database that are "+
				"open or prepared, and may still write into slot %s, to end: %s\n", *wait, len(ts), *pg.slot, admin.InFlightList(ts))
		}
		dropped, err := admin.Reset(ctx, conn, *pg.slot, *pg.schema, admin.ResetOptions{Publication: *pg.publication,
			MessagePrefix: *messagePrefix, Force: *force, PeekLimit: *peekLimit, PeekTimeout: *peekTimeout,
			InFlightWait: *wait, OnInFlight: onWait, IgnoreInFlight: *ignoreInFlight})
		if err != nil {
			return err
		}
		if len(dropped.InFlight) > 0 {
			fmt.Fprintf(stdout, "reset --ignore-in-flight: %d transactions were still open or prepared; their events will "+
				"never be published: %s\n", len(dropped.InFlight), admin.InFlightList(dropped.InFlight))
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
