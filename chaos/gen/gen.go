package gen

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// Setup is what one seed runs: the features of the world the router works in. Every field comes from the
// seed (Generate).
type Setup struct {
	Seed           int64
	Tables         []string // outbox tables the router reads, public.outbox first
	Shards         int      // 0: one router; N: N sharded routers (--shard i/N)
	QueueType      string   // the consumer's queue: classic or quorum
	UnroutableType string   // --unroutable-queue-type
	Lanes, Window  int
	SnapshotRows   int // rows written before the first start: the initial snapshot copies them
	Writers        int
	Duration       time.Duration // how long the schedule writes and injects faults
	// FullQueue adds a queue of the run's own, bound to order.refused, with x-max-length 1 and x-overflow
	// reject-publish and one message in it: the broker nacks every event routed there (OpRefused), and
	// the routers (--refusal-retry 2s) must quarantine it with the broker's reason.
	FullQueue bool
	// Emit sets emitted events up (migrate --emit-function --emit-role <db>_writer, run --message-prefix;
	// never with shards, which refuse --message-prefix): the writers connect as that role, OpEmit
	// transactions emit events through cdc_router.emit beside outbox rows, and OpForged ones, from a role
	// without EXECUTE on emit, write messages with the prefix that no key signed and try emit itself.
	Emit bool
	// OwnBroker runs the world on a RabbitMQ node the harness starts itself (never the shared broker),
	// so that FaultBrokerRestart and FaultMemAlarm may act on the whole broker.
	OwnBroker bool
	// Partitioned makes public.outbox partitioned (migrate --partitioned; one table, no shards): the
	// writers put some rows into partitions the harness attaches for ranges of their own, and
	// FaultPartAttach, FaultPartDetach and FaultPartDrop change them during the run.
	Partitioned bool
	// Mapped adds MappedTable, a table in Debezium's shape (not the native outbox's) that the routers read
	// with a --config file (decode's mapping): its rows are of aggregate type "mapped", their version a
	// column the file places as a header. Keyless leaves the file without an event key
	// (table.field.event.key=: order is kept per routing value). ExchangeByTopic routes its events to the
	// exchange their topic names (amqp.topic.target=exchange), one of the harness's own, which
	// FaultExchangeDelete and FaultExchangeUnbind take away for a while.
	Mapped, Keyless, ExchangeByTopic bool
	// InternalExchange (with ExchangeByTopic) makes the mapping's topic the whole name of its exchange, so
	// that OpInternal rows can name amq.rabbitmq.trace.
	InternalExchange bool
	// AggregateWindow is the routers' --aggregate-window (0: the default, 1): more than 1 pipelines an
	// aggregate's events, which keeps their first deliveries in commit order unless the broker refuses one
	// (docs/howto/tune-throughput.md#hot-aggregates), so it is drawn only for setups whose broker refuses nothing.
	AggregateWindow int
	// Standby runs a hot standby beside each router (each shard's, with shards): a second process on the same
	// slot with the same flags and a /readyz port of its own (docs/howto/run-two-routers.md#how-the-standby-waits).
	// The router faults then hit the active one, and FaultPGCutActive cuts its PostgreSQL connections alone.
	Standby bool
	// OnDriftQuarantine starts the routers with --on-drift=quarantine (docs/howto/change-the-outbox-schema.md#what-each-change-does: it can stay
	// set): a FaultDrift's rows are quarantined and the stream goes on. Without it the routers refuse the
	// first drifted row, and the harness restarts them with the flag once the column is restored, as the
	// docs' safe procedure says.
	OnDriftQuarantine bool
}

// MappedTable is the table of Setup.Mapped.
const MappedTable = "public.events_mapped"

// Routers is how many router processes the setup runs.
func (s Setup) Routers() int { return max(s.Shards, 1) }

func (s Setup) String() string {
	full := ""
	if s.FullQueue {
		full = " full_queue=true"
	}
	if s.Emit {
		full += " emit=true"
	}
	if s.OwnBroker {
		full += " own_broker=true"
	}
	if s.Partitioned {
		full += " partitioned=true"
	}
	if s.Mapped {
		full += fmt.Sprintf(" mapped=true keyless=%v exchange_by_topic=%v", s.Keyless, s.ExchangeByTopic)
	}
	if s.InternalExchange {
		full += " internal_exchange=true"
	}
	if s.AggregateWindow > 1 {
		full += fmt.Sprintf(" aggregate_window=%d", s.AggregateWindow)
	}
	if s.Standby {
		full += " standby=true"
	}
	if s.OnDriftQuarantine {
		full += " on_drift=quarantine"
	}
	return fmt.Sprintf("seed=%d tables=%s shards=%d queue=%s unroutable=%s lanes=%d window=%d snapshot_rows=%d writers=%d duration=%v%s",
		s.Seed, strings.Join(s.Tables, ","), s.Shards, s.QueueType, s.UnroutableType, s.Lanes, s.Window,
		s.SnapshotRows, s.Writers, s.Duration, full)
}

// Kind names an operation or a fault.
type Kind string

// Writer operations: one transaction each.
const (
	OpSingle  Kind = "single"        // one row
	OpMulti   Kind = "multi"         // N rows of several aggregates
	OpBurst   Kind = "burst"         // N consecutive versions of one aggregate
	OpLarge   Kind = "large"         // N rows (hundreds to thousands), several aggregates
	OpCopy    Kind = "copy"          // N rows by COPY
	OpPoison  Kind = "poison"        // a row the router must quarantine (headers not a JSON object) among good ones
	OpDelete  Kind = "insert-delete" // N rows inserted and deleted in the same transaction (the slot is their only copy)
	OpHuge    Kind = "huge"          // one aggregate, tens of thousands of rows, in one transaction (known broken under cuts)
	OpRefused Kind = "refused"       // a row routed to the full queue (Setup.FullQueue) among good ones: the broker nacks it
	OpEmit    Kind = "emit"          // N events, each emitted through cdc_router.emit or inserted as a row, in one transaction (Setup.Emit)
	OpForged  Kind = "forged"        // N messages with the prefix from a role without EXECUTE on emit: unsigned, a forged MAC, or a call of emit (Setup.Emit)
	OpTooBig  Kind = "too-big"       // a row whose message is over the own node's max_message_size (Setup.OwnBroker) among good ones: RabbitMQ closes the channel with 406
)

// MaxMessageSize is the max_message_size of the harness's own RabbitMQ node (in its rabbitmq.conf, so it
// holds across the node's restarts), and TooBigPayload the size of an OpTooBig row's payload: under the
// routers' --max-payload-bytes (8 MiB), which they check themselves, over the broker's limit, which they
// cannot know.
const (
	MaxMessageSize = 256 << 10
	TooBigPayload  = 300 << 10
)

// Faults and operator commands.
const (
	FaultKill      Kind = "router-sigkill"  // SIGKILL a router, restart it after Dur
	FaultTerm      Kind = "router-sigterm"  // SIGTERM a router, wait for its exit, restart it
	FaultAMQPCut   Kind = "amqp-cut"        // close the router's broker connections
	FaultAMQPPause Kind = "amqp-pause"      // forward nothing to or from the broker for Dur
	FaultPGCut     Kind = "pg-cut"          // close the router's PostgreSQL connections
	FaultPGPause   Kind = "pg-pause"        // forward nothing to or from PostgreSQL for Dur
	FaultPGFast    Kind = "pg-restart-fast" // PostgreSQL fast shutdown, start after Dur
	FaultPGCrash   Kind = "pg-crash"        // PostgreSQL immediate shutdown (crash recovery), start after Dur
	CmdBackfill    Kind = "backfill"        // cdc-router backfill --where true (duplicates, on purpose)
	CmdResetLive   Kind = "reset-refused"   // cdc-router reset (no --force) while the routers run: must refuse
	CmdResetIdle   Kind = "reset-stopped"   // stop router 0, write for Dur, reset without --force, start it again
	FaultPubGap    Kind = "publication-gap" // drop the table from the publication and add it back within Dur
	CmdGapBackfill Kind = "gap-backfill"    // the backfill a router's publication-gap ERROR names, run as the operator would
	FaultPGHole    Kind = "pg-blackhole"    // forward nothing to or from PostgreSQL for Dur (30 s), past wal_sender_timeout
	// On the harness's own RabbitMQ node only (Setup.OwnBroker):
	FaultBrokerRestart Kind = "broker-restart"      // rabbitmqctl stop_app, start_app after Dur: every connection closes
	FaultMemAlarm      Kind = "memory-alarm"        // vm_memory_high_watermark 0 for Dur: the broker blocks every publisher
	FaultQueuePolicy   Kind = "queue-length-policy" // a policy of the run's own on the consumer's queue (QueuePolicies[N], x-overflow reject-publish) for Dur: the broker nacks
	FaultBrokerKill    Kind = "broker-sigkill"      // SIGKILL the node's Erlang VM, start it again after Dur from the same data directory
	FaultPGRights      Kind = "pg-rights-revoked"   // the routers' PostgreSQL role loses REPLICATION (N=0) or SELECT on public.outbox (N=1), its sessions terminated, or INSERT, UPDATE and DELETE on the router's own tables (N=2, its sessions left running) for Dur, then regains it (on own-broker seeds only, to keep the others' plans)
	FaultPermissions   Kind = "permissions-revoked" // the routers' user loses write on its exchange (N=0) or configure (N=1) for Dur, its connections closed, then restored
	FaultColumn        Kind = "column-change"       // a change the router must not notice (docs/howto/change-the-outbox-schema.md#what-each-change-does): an extra column added, its nullability changed, dropped
	FaultDrift         Kind = "column-drift"        // a change the router must notice: public.outbox's headers retyped to text (N=0), or another table added to the publication and written (N=1), for Dur, then restored (a drift refusal, then --on-drift=quarantine)
	CmdReplay          Kind = "quarantine-replay"   // fix the open records' rows in place (headers), then cdc-router quarantine replay them all
	// With Setup.Partitioned:
	FaultPartAttach Kind = "partition-attach" // create a partition for a new range and attach it: the writers' rows go there
	FaultPartDetach Kind = "partition-detach" // detach the oldest attached partition of the harness's (the table stays)
	FaultPartDrop   Kind = "partition-drop"   // drop the oldest partition of the harness's, attached or detached: its rows go with it
	// With Setup.ExchangeByTopic: the mapped table's exchange taken away for Dur, then put back as its
	// operator would (declared and bound again), and the records its absence made replayed (CmdReplay).
	FaultExchangeDelete Kind = "exchange-delete" // delete the exchange: its events are quarantined, naming it
	FaultExchangeUnbind Kind = "exchange-unbind" // unbind the consumer's queue: its events are returned, retried for --refusal-retry, then quarantined
)

// QueuePolicies are the definitions FaultQueuePolicy applies (its N picks one): every one with
// overflow reject-publish, so that the broker nacks what the queue refuses
// (docs/howto/broker-refusals-and-alarms.md#events-the-broker-refuses). max-length 0 refuses every message, max-length-bytes 1 every message with a body,
// max-length 1 only while a message waits unconsumed. drop-head, RabbitMQ's default overflow, is never
// generated: it confirms the message and then drops the queue's oldest, a loss by the broker's design that
// no publisher can see.
var QueuePolicies = []string{`{"max-length":0,"overflow":"reject-publish"}`,
	`{"max-length-bytes":1,"overflow":"reject-publish"}`, `{"max-length":1,"overflow":"reject-publish"}`}

// knownBroken are the kinds that find an open finding on today's main, or whose operator flow the harness
// does not model yet. They are generated only when -chaos.known-broken names them (or "all"), so that the
// default seeds pass and each becomes part of the default mix once its fix (and its flow) is in. Fixed and in
// the default mix since: huge (issue 19 finding 8), pg-blackhole (12), reset-stopped (3), multitable-snapshot
// (11), publication-gap (1: the runner runs the backfill the router names, operator.go), long-memory-alarm
// (seed 73: /readyz answers 503 while the broker blocks the connection) and snapshot-resume-deleted (a resumed initial snapshot leaves the rows its slot's snapshot did not see to the
// stream, snapshot.Config.SeenBy); their original seeds are fixed cases (fixedCases in chaos_test.go).
var knownBroken = map[Kind]string{}

// LongMemAlarm lets memory alarms last up to 30 s, past the checker's 20 s stall bound: in the default mix
// since /readyz answers 503 while RabbitMQ blocks the connection (seed 73 found the silent stall; it is a
// fixed case).
const LongMemAlarm Kind = "long-memory-alarm"

// Step is one operation or fault at offset At from the start of the schedule.
type Step struct {
	At     time.Duration
	Kind   Kind
	Writer int           // for operations: which writer
	Router int           // for router faults: which router
	N      int           // rows of an operation
	Dur    time.Duration // a pause's length, a downtime, a gap
	// AfterHuge: At counts from the commit of the huge transaction, not from the start.
	AfterHuge bool
}

func (s Step) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "+%6.2fs %s", s.At.Seconds(), s.Kind)
	switch {
	case s.Kind == FaultPause:
		fmt.Fprintf(&b, " sessions=%s", [...]string{"left", "walsender-terminated"}[s.N])
	case s.Kind == FaultColumn:
		fmt.Fprintf(&b, " change=%d", s.N)
	case s.Kind == FaultQueuePolicy:
		fmt.Fprintf(&b, " policy=%s", QueuePolicies[s.N])
	case s.Kind == FaultPGRights:
		fmt.Fprintf(&b, " revoked=%s", [...]string{"REPLICATION", "SELECT", "writes-on-cdc_router"}[s.N])
	case s.Kind == FaultDrift:
		fmt.Fprintf(&b, " drift=%s", [...]string{"headers-text", "other-table"}[s.N])
	case s.Kind == FaultPermissions:
		fmt.Fprintf(&b, " revoked=%s", [...]string{"write-on-exchange", "configure"}[s.N])
	case s.Kind == CmdResetInFlight:
		fmt.Fprintf(&b, " commit=%s", [...]string{"after-the-reset", "while-reset-waits"}[s.N])
	case s.Kind == CmdRetireInFlight:
		fmt.Fprintf(&b, " commit=%s", [...]string{"after-a-refusal", "while-retire-waits"}[s.N])
	case s.Kind == CmdInboxRequests:
		fmt.Fprintf(&b, " way=%s", InboxRequestWays[s.N])
	case s.N > 0:
		fmt.Fprintf(&b, " rows=%d", s.N)
	}
	switch s.Kind {
	case FaultKill, FaultTerm, CmdResetLive, FaultPGCutActive, FaultPause: // a cut or a pause hits every router: the proxies are shared
		fmt.Fprintf(&b, " router=%d", s.Router)
	}
	if s.Dur > 0 {
		fmt.Fprintf(&b, " for=%v", s.Dur.Round(time.Millisecond))
	}
	if s.AfterHuge {
		b.WriteString(" (after the huge transaction's commit)")
	}
	return b.String()
}

// Plan is a Setup and its schedule: the writers' operations and the faults, each sorted by time.
type Plan struct {
	Setup  Setup
	Ops    [][]Step // per writer
	Faults []Step
	// WaitForStreaming holds the writers until every router streams, so that the initial snapshot finds
	// the tables empty (several tables, while "multitable-snapshot" was known broken; it no longer is).
	WaitForStreaming bool
	// DeleteDuringSnapshot lets insert-delete transactions run before every router streams; otherwise
	// they write their rows without the delete until then (while "snapshot-resume-deleted" is gated).
	DeleteDuringSnapshot bool
	// PublicationCheck is the routers' --publication-check-interval (0: the default, 30 s): short when the
	// plan opens a publication gap, so that a router sees it and names its backfill within the run, or
	// retires emit keys (CmdRetireInFlight), so that the routers reload their keys as often.
	PublicationCheck time.Duration
}

// Options shape what Generate may choose.
type Options struct {
	KnownBroken map[Kind]bool // kinds of knownBroken to generate anyway; "all" enables every one
	Duration    time.Duration // 0: 20s
}

func (o Options) allowed(k Kind) bool {
	if _, broken := knownBroken[k]; !broken {
		return true
	}
	return o.KnownBroken[k] || o.KnownBroken["all"]
}

// Generate derives the whole plan from seed: the same seed and options give the same plan.
func Generate(seed int64, o Options) Plan {
	r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	s := Setup{Seed: seed, Tables: []string{"public.outbox"}, Duration: o.Duration}
	if s.Duration == 0 {
		s.Duration = 20 * time.Second
	}
	switch r.IntN(4) {
	case 0:
		s.Shards = 2
	case 1:
		s.Tables = append(s.Tables, "public.outbox_b") // several tables take no --shard
	}
	s.QueueType = pick(r, "classic", "quorum")
	s.UnroutableType = pick(r, "classic", "quorum")
	s.Lanes = pick(r, 1, 2, 4, 8)
	s.Window = pick(r, 8, 64, 512)
	s.SnapshotRows = pick(r, 0, 0, 50, 400)
	wait := len(s.Tables) > 1 && !o.allowed("multitable-snapshot")
	if wait {
		s.SnapshotRows = 0
	}
	s.Writers = 1 + r.IntN(3)
	p := Plan{Setup: s, Ops: make([][]Step, s.Writers), WaitForStreaming: wait,
		DeleteDuringSnapshot: o.allowed("snapshot-resume-deleted")}
	for w := range s.Writers {
		p.Ops[w] = genOps(r, w, s.Duration, o)
	}
	p.Faults = genFaults(r, s, o)
	addRefusals(&p, seed)
	addEmits(&p, seed)
	addBrokerFaults(&p, seed, o)
	addPartitions(&p, seed)
	addReplays(&p, seed)
	addColumnChanges(&p, seed)
	addMapped(&p, seed)
	addOwnBrokerFaults(&p, seed)
	addPGRights(&p, seed)
	addAggregateWindow(&p, seed)
	addStandby(&p, seed)
	addDrift(&p, seed)
	addTooBig(&p, seed)
	addResetInFlight(&p, seed)
	addRetireInFlight(&p, seed)
	addInternalExchange(&p, seed)
	addInboxRequests(&p, seed)
	for _, f := range p.Faults {
		if f.Kind == FaultPubGap || f.Kind == CmdRetireInFlight {
			p.PublicationCheck = 2 * time.Second
		}
	}
	for _, op := range p.Ops[0] {
		if op.Kind == OpHuge {
			// The finding needs the transaction to commit (no PostgreSQL restart aborts it) and repeated
			// cuts while it is published.
			var fs []Step
			for _, f := range p.Faults {
				if f.Kind != FaultPGFast && f.Kind != FaultPGCrash {
					fs = append(fs, f)
				}
			}
			for i := range 3 {
				fs = append(fs, Step{At: time.Duration(500+1500*i) * time.Millisecond, Kind: FaultAMQPCut, AfterHuge: true})
			}
			p.Faults = fs
		}
	}
	addPause(&p, seed)
	addHot(&p, seed)
	return p
}

// addRefusals gives a third of the seeds the full queue, and turns one to three of their single-row
// transactions into OpRefused: 2–4 rows, the first refused, the others later versions of its aggregate (the
// writer's rowsFor), so that a router without its per-aggregate hold writes them beside the refused one
// (issue 36). It draws from a generator of its own, so that the rest of every plan stays what it was before
// the feature came.
func addRefusals(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0xf011))
	if r.IntN(3) != 0 {
		return
	}
	p.Setup.FullQueue = true
	left := 1 + r.IntN(3) // each holds its stream for --refusal-retry
	for w := range p.Ops {
		for i := range p.Ops[w] {
			if op := &p.Ops[w][i]; left > 0 && op.Kind == OpSingle && r.IntN(100) < 2 {
				op.Kind, op.N = OpRefused, 2+r.IntN(3) // its later rows are later versions of the refused row's aggregate
				left--
			}
		}
	}
}

// addEmits gives half of the seeds without shards emitted events: about one single-row transaction in 15
// becomes OpEmit (1–6 events, some emitted, some rows), and writer 0 gets 2–5 OpForged steps. Like
// addRefusals it draws from a generator of its own.
func addEmits(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0xe417))
	if p.Setup.Shards > 0 || r.IntN(2) != 0 {
		return
	}
	p.Setup.Emit = true
	for w := range p.Ops {
		for i := range p.Ops[w] {
			if op := &p.Ops[w][i]; op.Kind == OpSingle && r.IntN(15) == 0 {
				op.Kind, op.N = OpEmit, 1+r.IntN(6)
			}
		}
	}
	for range 2 + r.IntN(4) {
		p.Ops[0] = append(p.Ops[0], Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 4 / 5))), Kind: OpForged, N: 1 + r.IntN(3)})
	}
	sort.SliceStable(p.Ops[0], func(i, j int) bool { return p.Ops[0][i].At < p.Ops[0][j].At })
}

// addBrokerFaults moves a quarter of the seeds to a broker node of the harness's own and gives them one
// or two broker restarts (1–6 s down) or memory alarms (2–12 s; up to 30 s, longer than the checker's
// stall bound, only with LongMemAlarm). Like addRefusals it draws from a generator of its own.
func addBrokerFaults(p *Plan, seed int64, o Options) {
	r := rand.New(rand.NewPCG(uint64(seed), 0xb40c))
	if r.IntN(4) != 0 {
		return
	}
	p.Setup.OwnBroker = true
	for range 1 + r.IntN(2) {
		f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 3 / 5))), Kind: pick(r, FaultBrokerRestart, FaultMemAlarm)}
		if f.Kind == FaultBrokerRestart {
			f.Dur = time.Duration(1000+r.IntN(5000)) * time.Millisecond
		} else {
			f.Dur = time.Duration(2000+r.IntN(28000)) * time.Millisecond
			if f.Dur > 12*time.Second && !o.allowed(LongMemAlarm) {
				f.Dur = 2*time.Second + f.Dur%(10*time.Second)
			}
		}
		p.Faults = append(p.Faults, f)
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// addPartitions makes a third of the seeds with one table and no shards partitioned, with two to four
// partition changes in the first four fifths. Like addRefusals it draws from a generator of its own.
//
// A publication gap stays in the plan: the publication names the partitioned root, the gap's backfill reads
// the root (every partition attached then, by xmin), and a partition attached during the gap gets its rows
// published by the backfill alone. A detach or a drop after the gap's start would take the gap's rows with
// it before the backfill reads them: a loss by the operator's hand that the checker does not model, so the
// changes drawn after the first gap attach a partition instead.
func addPartitions(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x9a47))
	if len(p.Setup.Tables) > 1 || p.Setup.Shards > 0 || r.IntN(3) != 0 {
		return
	}
	p.Setup.Partitioned = true
	gap := time.Duration(-1)
	for _, f := range p.Faults {
		if f.Kind == FaultPubGap && (gap < 0 || f.At < gap) {
			gap = f.At
		}
	}
	for range 2 + r.IntN(3) {
		f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 4 / 5))),
			Kind: pick(r, FaultPartAttach, FaultPartDetach, FaultPartDrop)}
		if gap >= 0 && f.At >= gap {
			f.Kind = FaultPartAttach
		}
		p.Faults = append(p.Faults, f)
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// addReplays gives half of the seeds one or two quarantine replays at random moments between two and four
// fifths of the duration. Like addRefusals it draws from a generator of its own.
func addReplays(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x4e91))
	if r.IntN(2) != 0 {
		return
	}
	for range 1 + r.IntN(2) {
		// After two fifths, so that there are records to replay.
		p.Faults = append(p.Faults, Step{At: p.Setup.Duration*2/5 + time.Duration(r.Int64N(int64(p.Setup.Duration*2/5))), Kind: CmdReplay})
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// addTooBig turns one or two single-row transactions of each seed on the harness's own node into OpTooBig
// (its first row over the node's max_message_size: a 406 that retrying never cures, which the routers must
// quarantine after three refusals of the event alone), except where an --aggregate-window over 1 is drawn
// (a refusal trades order there). From a generator of its own, last, so that no other choice of a plan
// changes.
func addTooBig(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x7b16))
	if !p.Setup.OwnBroker || p.Setup.AggregateWindow > 1 {
		return
	}
	var singles []*Step
	for w := range p.Ops {
		for i := range p.Ops[w] {
			if p.Ops[w][i].Kind == OpSingle {
				singles = append(singles, &p.Ops[w][i])
			}
		}
	}
	for range min(1+r.IntN(2), len(singles)) {
		op := singles[r.IntN(len(singles))]
		op.Kind, op.N = OpTooBig, 1+r.IntN(3)
	}
}

// addDrift gives a quarter of the seeds one FaultDrift (1–4 s) in the first three fifths, and a third of
// those --on-drift=quarantine from the start; a third of the drifts (since 3 December 2026) are another
// table added to the publication (N=1) rather than headers retyped. From a generator of its own, last, so that no other choice
// of a plan changes.
func addDrift(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0xd71f))
	if r.IntN(4) != 0 {
		return
	}
	p.Setup.OnDriftQuarantine = r.IntN(3) == 0
	f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 3 / 5))), Kind: FaultDrift,
		Dur: time.Duration(1000+r.IntN(3000)) * time.Millisecond}
	if rand.New(rand.NewPCG(uint64(seed), 0xd720)).IntN(3) == 0 { // a generator of its own: the draws above stay
		f.N = 1
	}
	p.Faults = append(p.Faults, f)
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// addColumnChanges gives a third of the seeds two to four column changes of public.outbox in the first four
// fifths. Like addRefusals it draws from a generator of its own.
func addColumnChanges(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0xc01c))
	if r.IntN(3) != 0 {
		return
	}
	for range 2 + r.IntN(3) {
		p.Faults = append(p.Faults, Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 4 / 5))), Kind: FaultColumn, N: r.IntN(4)})
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// addMapped gives a third of the seeds with one native table, no shards and no partitioned outbox a mapped
// table beside it (Setup.Mapped), keyless for half of them, and its events on an exchange of their topic
// for half, with one or two exchange faults (1–6 s) in the first three fifths. Like addRefusals it draws
// from a generator of its own, and it comes last, so that no other feature's choice changes.
func addMapped(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x3a99))
	s := &p.Setup
	if len(s.Tables) > 1 || s.Shards > 0 || s.Partitioned || r.IntN(3) != 0 {
		return
	}
	s.Mapped, s.Keyless, s.ExchangeByTopic = true, r.IntN(2) == 0, r.IntN(2) == 0
	s.Tables = append(s.Tables, MappedTable)
	if !s.ExchangeByTopic {
		return
	}
	for range 1 + r.IntN(2) {
		p.Faults = append(p.Faults, Step{At: time.Duration(r.Int64N(int64(s.Duration * 3 / 5))),
			Kind: pick(r, FaultExchangeDelete, FaultExchangeUnbind), Dur: time.Duration(1000+r.IntN(5000)) * time.Millisecond})
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// addAggregateWindow gives a third of the setups whose broker refuses no event (no full queue, no exchange
// of a topic taken away, no queue-length policy) an --aggregate-window of 4 or 64 (at most their --window), so that an aggregate's events are pipelined:
// their first deliveries must still be in commit order (found by CI, not by this harness, before it drew
// the option: a let-through event overtook queued ones of its aggregate). From a generator of its own,
// last, so that no other choice of a plan changes.
func addAggregateWindow(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0xa66))
	s := &p.Setup
	if s.FullQueue || s.ExchangeByTopic || p.Has(FaultQueuePolicy) || r.IntN(3) != 0 {
		return
	}
	s.AggregateWindow = min(pick(r, 4, 64), s.Window) // run refuses one over --window
}

// addOwnBrokerFaults gives each seed on the harness's own node (Setup.OwnBroker) one or two of a
// queue-length policy (1–8 s), a SIGKILL of the node (down 1–6 s) and its routers' user's permissions
// revoked (1–6 s), in the first three fifths: no more, since the node's faults are applied one after
// another and rabbitmqctl takes seconds, so that more would come after the writers stopped. It draws from
// a generator of its own and comes after every other, so that no plan on the shared broker changes.
func addOwnBrokerFaults(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x0b0c))
	if !p.Setup.OwnBroker {
		return
	}
	kinds := []Kind{FaultQueuePolicy, FaultBrokerKill, FaultPermissions}
	r.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	for _, k := range kinds[:1+r.IntN(2)] {
		f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 3 / 5))), Kind: k,
			Dur: time.Duration(1000+r.IntN(5000)) * time.Millisecond}
		switch k {
		case FaultQueuePolicy:
			f.N, f.Dur = r.IntN(len(QueuePolicies)), time.Duration(1000+r.IntN(7000))*time.Millisecond
		case FaultPermissions:
			f.N = r.IntN(2)
		}
		p.Faults = append(p.Faults, f)
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// addPGRights gives half of the seeds on the harness's own node (only those, so that the plans of the
// others stay what they were) a revocation of one right of the routers' PostgreSQL role, for 1–6 s in the
// first three fifths: REPLICATION or SELECT on the outbox, or for a third of them (since 3 December 2026,
// from a generator of its own) the writes on the router's own tables. It draws from a generator of its own,
// after every other.
func addPGRights(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x0b0d))
	if !p.Setup.OwnBroker || r.IntN(2) != 0 {
		return
	}
	f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 3 / 5))), Kind: FaultPGRights,
		N: r.IntN(2), Dur: time.Duration(1000+r.IntN(5000)) * time.Millisecond}
	if rand.New(rand.NewPCG(uint64(seed), 0x0b0e)).IntN(3) == 0 { // a generator of its own: the older draws stay
		f.N = 2
	}
	p.Faults = append(p.Faults, f)
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}

// Has reports whether the plan has a fault, command or operation of kind k.
func (p Plan) Has(k Kind) bool {
	for _, f := range p.Faults {
		if f.Kind == k {
			return true
		}
	}
	for _, w := range p.Ops {
		for _, op := range w {
			if op.Kind == k {
				return true
			}
		}
	}
	return false
}

func pick[T any](r *rand.Rand, xs ...T) T { return xs[r.IntN(len(xs))] }

// genOps is one writer's transactions: mostly small, some multi-row, bursts, COPY and large ones.
func genOps(r *rand.Rand, w int, d time.Duration, o Options) []Step {
	var ops []Step
	gap := time.Duration(30+r.IntN(120)) * time.Millisecond
	for at := time.Duration(0); at < d; at += time.Duration(r.Int64N(int64(2 * gap))) {
		st := Step{At: at, Writer: w, Kind: OpSingle}
		switch x := r.IntN(100); {
		case x < 20:
			st.Kind, st.N = OpMulti, 2+r.IntN(9)
		case x < 28:
			st.Kind, st.N = OpBurst, 5+r.IntN(60)
		case x < 32:
			st.Kind, st.N = OpCopy, 20+r.IntN(200)
		case x < 34:
			st.Kind, st.N = OpLarge, 200+r.IntN(800)
		case x < 36:
			st.Kind, st.N = OpPoison, 1+r.IntN(5)
		case x < 39:
			st.Kind, st.N = OpDelete, 1+r.IntN(5)
		default:
			st.N = 1
		}
		ops = append(ops, st)
	}
	if w == 0 && o.allowed(OpHuge) && r.IntN(3) == 0 {
		ops = append(ops, Step{At: d / 4, Writer: w, Kind: OpHuge, N: 20000 + r.IntN(20000)})
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].At < ops[j].At })
	}
	return ops
}

// genFaults is the fault schedule: a few faults spread over the duration, none in its last fifth so the
// run ends with a quiet settle.
func genFaults(r *rand.Rand, s Setup, o Options) []Step {
	kinds := []Kind{FaultKill, FaultTerm, FaultAMQPCut, FaultAMQPPause, FaultPGCut, FaultPGPause, FaultPGFast,
		FaultPGCrash, CmdBackfill, CmdResetLive}
	for _, k := range []Kind{CmdResetIdle, FaultPubGap, FaultPGHole} {
		if o.allowed(k) {
			kinds = append(kinds, k)
		}
	}
	var fs []Step
	n := 2 + r.IntN(6)
	for range n {
		f := Step{At: time.Duration(r.Int64N(int64(s.Duration * 4 / 5))), Kind: pick(r, kinds...), Router: r.IntN(s.Routers())}
		switch f.Kind {
		case FaultKill, FaultPGFast, FaultPGCrash:
			f.Dur = time.Duration(100+r.IntN(2000)) * time.Millisecond
		case FaultAMQPPause, FaultPGPause:
			f.Dur = time.Duration(500+r.IntN(5000)) * time.Millisecond
		case CmdResetIdle:
			f.Dur = time.Duration(500+r.IntN(2000)) * time.Millisecond
		case FaultPGHole:
			f.Dur = 30 * time.Second
		case FaultPubGap:
			f.Dur = time.Duration(100+r.IntN(900)) * time.Millisecond
			if s.Shards > 0 {
				f.Kind = FaultPGCut // the shards' publications are row-filtered copies; not generated yet
			}
		}
		fs = append(fs, f)
	}
	sort.SliceStable(fs, func(i, j int) bool { return fs[i].At < fs[j].At })
	return fs
}

// Describe is the plan as a run prints it at its start: the setup, the operations per kind, the faults.
func (p Plan) Describe() string {
	var b strings.Builder
	fmt.Fprintf(&b, "setup: %s\n", p.Setup)
	ops := map[Kind]int{}
	rows := 0
	for _, w := range p.Ops {
		for _, op := range w {
			ops[op.Kind]++
			rows += max(op.N, 1)
		}
	}
	fmt.Fprintf(&b, "operations: %s (about %d rows)\nfaults:\n", Counts(ops), rows)
	for _, f := range p.Faults {
		fmt.Fprintf(&b, "  %s\n", f)
	}
	return b.String()
}

// Counts is m as "k=n ..." in key order.
func Counts[K ~string](m map[K]int) string {
	var parts []string
	for k, n := range m {
		parts = append(parts, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
