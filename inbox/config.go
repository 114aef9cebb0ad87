package inbox

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// GapPolicy says what Process does with an event that arrives ahead of a gap (its version is more than
// one above the applied version).
type GapPolicy int

const (
	// Park stores the event in the parked table and commits; the delivery is acknowledged. The event is
	// applied in the transaction that closes the gap. This is the default.
	Park GapPolicy = iota
	// Requeue rolls everything back (the inbox row too) and returns the Gap outcome; the delivery is
	// requeued with backoff, and retried until the missing versions have been applied.
	Requeue
)

// String names the policy.
func (g GapPolicy) String() string {
	switch g {
	case Park:
		return "park"
	case Requeue:
		return "requeue"
	}
	return fmt.Sprintf("GapPolicy(%d)", int(g))
}

// Config configures a Processor and the one-channel loop runner.Consume. Only Consumer is required: Defaults
// fills in every other unset field.
type Config struct {
	// Consumer names this projection (this consumer of the events). Records are kept per consumer, so
	// two projections sharing one schema never see each other's events. Required: 1 to 63 characters,
	// stable across restarts and shared by every instance of the same projection.
	Consumer string
	// Schema holds the inbox tables (see MigrateSchema). Default DefaultSchema ("inbox").
	Schema string
	// OnGap is what happens to an event ahead of a gap. Default Park.
	OnGap GapPolicy

	// LockTimeout bounds each wait for a lock in an event's transaction (SET LOCAL lock_timeout), so a
	// consumer whose transaction froze while holding an aggregate's row lock stalls only that aggregate,
	// for this long per attempt: the waiting event fails with a transient error (SQLSTATE 55P03) and is
	// retried. Default 5s; negative leaves the session's own setting.
	LockTimeout time.Duration
	// StatementTimeout bounds each statement of an event's transaction, the handler's included (SET
	// LOCAL statement_timeout). Default 30s; negative leaves the session's own setting.
	StatementTimeout time.Duration
	// MaxAttempts is how many failed attempts an event gets before it is recorded in the failed table
	// with reason 'exhausted' and acknowledged (the Failed outcome). Attempts are counted durably per
	// consumer and event id; errors that say nothing about the event (lock timeout, deadlock,
	// serialization failure, the server shutting down or out of connections, a cancelled context) are
	// not counted. Default 10; negative counts without a cap.
	MaxAttempts int
	// Prepare, if set, runs in one transaction of its own before the schema check, each time the
	// check runs: in New, or, when PostgreSQL does not answer then, in the Runner once it does. Migrate
	// there (inbox.MigrateSchema(ctx, tx, schema)) and create the projection's own tables, idempotently,
	// so that a consumer started before its database waits for it instead of exiting.
	Prepare func(ctx context.Context, tx pgx.Tx) error

	// Prefetch is the AMQP basic.qos prefetch count of runner.Consume. Default 16. With OnGap
	// Requeue it must not be 1: the missing event has to be delivered while the early one is held.
	Prefetch int
	// RetryMin is runner.Consume's first backoff before a failed delivery is requeued; it doubles, with jitter,
	// with the event's counted attempts (or the channel's run of uncounted failures) up to RetryMax.
	// Defaults 100ms and 10s.
	RetryMin, RetryMax time.Duration
}

// Defaults returns the configuration with every unset field set to its documented default.
func (c Config) Defaults() Config {
	if c.Schema == "" {
		c.Schema = DefaultSchema
	}
	if c.LockTimeout == 0 {
		c.LockTimeout = 5 * time.Second
	}
	if c.StatementTimeout == 0 {
		c.StatementTimeout = 30 * time.Second
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 10
	}
	if c.Prefetch == 0 {
		c.Prefetch = 16
	}
	if c.RetryMin == 0 {
		c.RetryMin = 100 * time.Millisecond
	}
	if c.RetryMax == 0 {
		c.RetryMax = 10 * time.Second
	}
	return c
}

// Validate reports the first field that cannot work, in a sentence naming the fix.
func (c Config) Validate() error {
	switch {
	case c.Consumer == "":
		return fmt.Errorf("inbox config: Consumer is empty; set inbox.Config.Consumer to a stable name of this projection (for example \"billing-projection\"), the same for all its instances")
	case utf8.RuneCountInString(c.Consumer) > 63:
		return fmt.Errorf("inbox config: Consumer %q is longer than 63 characters; choose a shorter name", c.Consumer)
	case c.OnGap != Park && c.OnGap != Requeue:
		return fmt.Errorf("inbox config: OnGap is %v; use inbox.Park or inbox.Requeue", c.OnGap)
	case c.OnGap == Requeue && c.Prefetch == 1:
		return fmt.Errorf("inbox config: OnGap Requeue with Prefetch 1 requeues the early event to the head of the queue forever; raise Prefetch or use inbox.Park")
	case c.Prefetch < 0 || c.Prefetch > 65535:
		return fmt.Errorf("inbox config: Prefetch %d is outside 0..65535", c.Prefetch)
	case c.RetryMin < 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("inbox config: RetryMin %v and RetryMax %v must satisfy 0 <= RetryMin <= RetryMax", c.RetryMin, c.RetryMax)
	}
	return nil
}
