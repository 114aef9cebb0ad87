package replication

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/initial"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/pubcheck"
)

// Config configures the stream. The zero value of every duration means its documented default.
type Config struct {
	PGURL       string // ordinary postgres:// URL; replication=database is added here
	Slot        string // logical slot name; default cdc_router
	Publication string // publication name; default cdc_router_outbox
	Table       string // outbox table; default public.outbox
	Schema      string // the router's own schema; default cdc_router

	StatusInterval  time.Duration // standby status update period; default 1s
	ShutdownTimeout time.Duration // bound on reading to the commit and draining confirms at stop; default 30s
	StoreInterval   time.Duration // stored-position write period; default 1s
	MaxBackoff      time.Duration // cap of the restart backoff; default 30s
	// PublicationCheckInterval is how often a streaming router re-checks that the publication still carries
	// the outbox's inserts; default pubcheck.DefaultPublicationCheckInterval.
	PublicationCheckInterval time.Duration
	// ProgressInterval is how often a streaming router logs its progress at info level (only when events
	// moved); default metrics.DefaultProgressInterval.
	ProgressInterval time.Duration
	// RefusalRetry is how long an event that the broker returns (no binding on an exchange of its own) or
	// nacks (a queue refused it) is retried, alone in flight, before it is quarantined; default
	// cdc.DefaultRefusalRetry. The stream and the initial snapshot wait on it meanwhile.
	RefusalRetry time.Duration
	// PGTimeout bounds every wait on a PostgreSQL that accepts TCP but does not answer: each connection
	// attempt (a shorter connect_timeout in the URL wins), the setup queries after it, and the stream's silence
	// (a status update asks for a reply after half of it without a message); default pgserver.DefaultPGTimeout.
	PGTimeout time.Duration

	Decode decode.Config // row rules: payload limit and the router's message checks

	// Snapshot is "initial" (default: a new slot first publishes the rows already in the table, read in
	// the slot's own snapshot) or "never".
	Snapshot         string
	SnapshotWhere    string    // SQL predicate restricting the initial snapshot, e.g. published_at IS NULL
	SnapshotPageSize int       // rows per keyset page; default 2000
	Progress         io.Writer // a terminal for the snapshot's progress line, or nil

	// FailoverSlot creates the slot with FAILOVER (PostgreSQL 17+), so that a standby with
	// sync_replication_slots = on keeps a copy the router continues from after a promotion, and enables it on
	// an existing slot; refused before PostgreSQL 17.
	FailoverSlot bool

	// StandbyProbe, when set, checks that this router could take over the slot: a router standing by calls it
	// at once and every standbyProbeInterval (the broker it would publish to: reachable, the login and the
	// topology's declarations accepted), and answers /readyz 503 while it fails (spare.go).
	StandbyProbe func(ctx context.Context) error
	// Fence, when set, bounds how long the slot's lock outlives a router that stopped answering (its lease:
	// the run sets wal_sender_timeout to it on the replication connection, which holds the lock), and tells the
	// publisher, which must be given the same Fence (route.Config.Fence), when the router may no longer write
	// (fence.go). Nil: no bound of the router's own, and no fence.
	Fence *Fence
}

var slotName = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// WithDefaults returns c with every empty field set to its default.
func (c Config) WithDefaults() Config {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.Slot, "cdc_router")
	def(&c.Publication, "cdc_router_outbox")
	def(&c.Table, "public.outbox")
	def(&c.Schema, "cdc_router")
	def(&c.Snapshot, "initial")
	dur := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	dur(&c.StatusInterval, time.Second)
	dur(&c.ShutdownTimeout, 30*time.Second)
	dur(&c.StoreInterval, time.Second)
	dur(&c.MaxBackoff, 30*time.Second)
	dur(&c.PublicationCheckInterval, pubcheck.DefaultPublicationCheckInterval)
	dur(&c.ProgressInterval, metrics.DefaultProgressInterval)
	dur(&c.PGTimeout, pgserver.DefaultPGTimeout)
	if c.Decode.Table == "" {
		c.Decode.Table = c.Table
	}
	if c.Decode.Publication == "" {
		c.Decode.Publication = c.Publication
	}
	return c
}

// Validate reports the first setting that cannot work, as one sentence that names the fix.
func (c Config) Validate() error {
	if c.PGURL == "" {
		return errors.New("no PostgreSQL URL: set --pg-url or CDC_ROUTER_PG_URL (postgres://user:password@host:5432/db)")
	}
	if !slotName.MatchString(c.Slot) {
		return fmt.Errorf("slot name %q is invalid: use 1 to 63 lower-case letters, digits and underscores", c.Slot)
	}
	if l := c.Fence.Lease(); l > 0 && l < 4*c.StatusInterval {
		return fmt.Errorf("--lease %v is shorter than four status intervals (%v): use at least %v", l, 4*c.StatusInterval, 4*c.StatusInterval)
	}
	if c.Snapshot != "initial" && c.Snapshot != "never" {
		return fmt.Errorf("--snapshot %q: use initial or never", c.Snapshot)
	}
	return c.Decode.Validate()
}

// pubcheckConfig is what the publication checks need of c.
func (c Config) pubcheckConfig() pubcheck.Config {
	return pubcheck.Config{Slot: c.Slot, Schema: c.Schema, Publication: c.Publication, Table: c.Table, Decode: c.Decode,
		Interval: c.PublicationCheckInterval}
}

// startRules is what the refusals at start need of c.
func (c Config) startRules() pgserver.StartRules {
	return pgserver.StartRules{Slot: c.Slot, FailoverSlot: c.FailoverSlot}
}

// initialConfig is what the initial snapshot needs of c; pub, when it is the run's renewable publisher,
// lends it the safety net's renewal, and stop, when set, bounds the copy's stop by the run's.
func (c Config) initialConfig(pub Publisher, stop *stopClock) initial.Config {
	ic := initial.Config{PGURL: c.PGURL, PGTimeout: c.PGTimeout, Slot: c.Slot, Schema: c.Schema, Table: c.Table,
		Decode: c.Decode, Snapshot: c.Snapshot, SnapshotWhere: c.SnapshotWhere, SnapshotPageSize: c.SnapshotPageSize,
		Progress: c.Progress, RefusalRetry: c.RefusalRetry}
	if stop != nil {
		ic.StopBy = stop.copyBounds
	}
	if r, ok := pub.(*renewable); ok {
		ic.Renew = r.renew
	}
	return ic
}
