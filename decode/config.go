package decode

import (
	"errors"
	"fmt"

	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/decode/mapping"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Defaults applied by New and MapRow to zero Config fields.
const (
	// DefaultTable is the outbox table read when Config.Table is empty.
	DefaultTable = "public.outbox"
	// DefaultMaxPayloadBytes is the payload limit when Config.MaxPayloadBytes is zero: 8 MiB.
	DefaultMaxPayloadBytes = 8 << 20

	// OnDriftRefuse makes Decode return a *DriftError at the first insert it cannot decode because the
	// outbox's shape or the publication changed. It is the default.
	OnDriftRefuse = "refuse"
	// OnDriftQuarantine makes Decode quarantine such inserts, with the drift as the reason, and go on.
	OnDriftQuarantine = "quarantine"
)

// Config configures a Decoder and the row mapping.
type Config struct {
	// Table is the outbox table, "schema.table" or "table" in public (split at the first dot, names as
	// PostgreSQL stores them, so unquoted names are lower case). Default DefaultTable.
	Table string
	// MaxPayloadBytes is the largest payload accepted; any other outbox column may hold up to the larger
	// of it and DefaultMaxPayloadBytes. A row with a bigger value is quarantined, recognised from the
	// length on the wire without copying the value. Default DefaultMaxPayloadBytes; negative is invalid.
	MaxPayloadBytes int
	// Check, when set, validates each mapped event further (for example against AMQP limits). A non-nil
	// error quarantines the row with the error's text as the reason. It runs on the decoding goroutine.
	Check func(ev cdc.Event) error
	// OnDrift is what Decode does with an insert it cannot decode because of schema or publication drift
	// (an outbox column missing or of another type, an insert into a relation that is not the outbox):
	// OnDriftRefuse (the default) or OnDriftQuarantine.
	OnDrift string
	// MessagePrefix, when set, makes logical decoding messages emitted with this prefix
	// (pg_logical_emit_message(true, prefix, envelope)) events like outbox inserts; messages with another
	// prefix are skipped. Empty (the default) skips every message. The stream must be started with
	// pgoutput's messages option for any to arrive (PostgreSQL 14+).
	MessagePrefix string
	// EmitKeys are the keys <schema>.emit signs its messages with, by key id (migrations.LoadEmitKeys): a
	// message with MessagePrefix becomes an event only when it carries a valid MAC by one of them over its
	// envelope and its transaction's xid (emitauth.go); any other is quarantined. Without keys every message
	// with the prefix is quarantined.
	EmitKeys map[uint32][]byte
	// Mapping, when set, reads the outbox table in another shape, configured with Debezium's outbox option
	// names (--config; see LoadMapping); nil reads the native shape. Logical decoding messages and MapRow
	// always use the native shape; rows of a mapped table read with SELECT go through a RowMapper.
	Mapping *Mapping
	// Publication is the publication's name, used only to word the fix in a *DriftError; optional.
	Publication string
	// MoreTables are the further outbox tables of a router that reads several (run --table a --table b), each
	// with its own Mapping (nil: the native shape). An insert into any of Table and MoreTables is an
	// event; an insert into another relation is drift. Events keep WAL order across the tables.
	MoreTables []Outbox
}

// Outbox is one further outbox table of Config.MoreTables.
type Outbox struct {
	Table   string   // schema.table or table in public, as Config.Table
	Mapping *Mapping // the table's mapping; nil reads the native shape
}

// QualifiedTable is table as schema.name ("public." added to a name without a schema), the form in which
// Decode and the setup check compare table names.
func QualifiedTable(table string) string { return pgtext.QualifiedTable(table) }

// Validate reports the first invalid field of c, with the defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, _, ok := pgtext.SplitTable(c.Table); !ok {
		return fmt.Errorf("decode: table %q must be a table name, as schema.table or table", c.Table)
	}
	seen := map[string]bool{QualifiedTable(c.Table): true}
	for _, t := range c.MoreTables {
		if _, _, ok := pgtext.SplitTable(t.Table); !ok {
			return fmt.Errorf("decode: table %q must be a table name, as schema.table or table", t.Table)
		}
		if seen[QualifiedTable(t.Table)] {
			return fmt.Errorf("decode: table %s is named twice: name each outbox table once", QualifiedTable(t.Table))
		}
		seen[QualifiedTable(t.Table)] = true
	}
	if c.MaxPayloadBytes < 0 {
		return errors.New("decode: max payload bytes must not be negative")
	}
	if c.OnDrift != OnDriftRefuse && c.OnDrift != OnDriftQuarantine {
		return fmt.Errorf("decode: on-drift %q must be %q or %q", c.OnDrift, OnDriftRefuse, OnDriftQuarantine)
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.MaxPayloadBytes == 0 {
		c.MaxPayloadBytes = DefaultMaxPayloadBytes
	}
	if c.OnDrift == "" {
		c.OnDrift = OnDriftRefuse
	}
	return c
}

// Mapping is a mapped outbox's configuration: Debezium's outbox router options (package decode/mapping,
// which parses it, resolves it against a table and maps its rows).
type Mapping = mapping.Mapping

// limits are the bounds and the check of c for a mapped row.
func (c *Config) limits() mapping.Limits {
	return mapping.Limits{MaxPayloadBytes: c.MaxPayloadBytes, ValueLimit: max(c.MaxPayloadBytes, DefaultMaxPayloadBytes),
		Check: c.Check}
}
