package check

import (
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// History is everything one run recorded, the only input of the checker.
type History struct {
	Setup gen.Setup
	Start time.Time // the schedule's time zero
	End   time.Time // when recording stopped
	// Stopping is when the runner began to stop every router at the end (zero: not recorded).
	Stopping time.Time
	Rows     []Row // every row that committed: the tables' final content and the rows deleted in a transaction that committed
	Deliv    []Delivery
	Quar     []Quarantined
	Events   []Event // faults and operator commands as applied, and routers' own exits
	Ready    []Sample
	Logs     []LogLine
	// Acked is each slot's confirmed_flush_lsn at the end.
	Acked map[string]cdc.LSN
	// Bounds of the duplicates one fault may cause: the in-flight window (lanes × window) plus the largest
	// transaction.
	WindowRows, MaxTxnRows int
	// Broker is the broker's own view of the run's queues and bindings once the routers stopped
	// (rabbitmqctl list_queues and list_bindings, the lines that name the run's objects): where confirmed
	// messages went when the consumer did not get them (seed 9541).
	Broker string
	// Inbox is the final state of the inbox of a gen.CmdInboxRequests (nil without one).
	Inbox *InboxFinal `json:",omitempty"`
}

// Row is one committed outbox row.
type Row struct {
	ID        string
	Table     string
	Aggregate string // aggregate_type/aggregate_id
	Version   int64
	Poison    bool      // written so that the router must quarantine it
	Refused   bool      // the broker refuses it every time (routed to the full queue, which nacks it, or TooBig): the router must quarantine it
	TooBig    bool      // its message is over the harness's node's max_message_size (gen.OpTooBig): RabbitMQ closes the channel with 406; Refused too
	Deleted   bool      // deleted by its own transaction: only the slot ever had it
	Emitted   bool      // emitted through cdc_router.emit by a writer (a role with EXECUTE): no table has it, the slot only
	Forged    bool      // a message with the prefix from a role without EXECUTE on emit: must never be published
	Partition int       // with Setup.Partitioned: 1+g when written to the harness's partition g, 0 otherwise
	Committed time.Time // when the writer saw its commit (the attempt, when the commit's outcome was unknown)
	LSNAfter  cdc.LSN   // pg_current_wal_lsn() read after the commit: at or past the commit's end
	Txn       int       // the writer's transaction number, for the shortened history
	Op        gen.Kind  // the operation that wrote it
	Unknown   bool      // the commit's outcome was unknown to the writer (found in the table afterwards)
}

// Delivery is one message the consumer received.
type Delivery struct {
	At          time.Time
	MessageID   string
	Aggregate   string
	Version     int64
	Backfill    bool   // header x-backfill: a snapshot or backfill copy
	CommitLSN   string // header commit_lsn: for a copy, the position its snapshot or backfill read at (one per run)
	Redelivered bool
	Replayed    bool // header x-replayed: published by cdc-router quarantine replay
}

// Quarantined is one row of the quarantine table.
type Quarantined struct {
	ID      int64
	EventID string
	Reason  string
	Handled string    // handled_how: "replayed", "discarded" or "" (open)
	At      time.Time // quarantined_at
}

// Event is a fault or operator command the runner applied (From..To), or something a router did on its
// own (Kind "router-exit").
type Event struct {
	From, To time.Time
	Kind     gen.Kind
	Router   int
	Note     string // the outcome: exit code, the command's output's last line
	// With Setup.Standby, for a fault that hit one process of the router's slot: which one (Sample.Proc),
	// and when it was gone (its exit, or the cut of its PostgreSQL connections).
	Proc int
	Gone time.Time
	IDs  []string // the events a command acted on: for a replay, the rows it fixed (they must arrive replayed)
}

// KindIntruderEmit is a call of cdc_router.emit by a role without EXECUTE on it; Note says its outcome,
// "refused: …" when PostgreSQL denied it.
const KindIntruderEmit gen.Kind = "intruder-emit"

// KindRouterExit marks a router process that exited without being told to.
const KindRouterExit gen.Kind = "router-exit"

// Sample is one /readyz answer of one router (Code 0: no answer), asked at At. With Setup.Standby, Proc
// tells the slot's two processes apart and Active is the same process's /readyz?active=1 answer, asked
// after the first, which arrived at ActiveAt with the router's State in its body ("snapshot", "streaming";
// both zero in histories recorded before they were); the samples of one tick of the sampler share Round.
type Sample struct {
	At       time.Time
	Router   int
	Code     int
	Proc     int
	Active   int
	Round    int
	State    string    `json:",omitempty"`
	ActiveAt time.Time `json:",omitzero"`
}

// LogLine is one line a router process (or a command) wrote, with the time it carried.
type LogLine struct {
	At     time.Time
	Router int // -1 for commands
	Proc   int // with Setup.Standby: which of the slot's processes (Sample.Proc)
	Level  string
	Text   string
}
