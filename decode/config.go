package decode

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Defaults applied by New and MapRow to zero Config fields.
const (
	// DefaultTable is the outbox table read when Config.Table is empty.
	DefaultTable = "public.outbox"
	// DefaultMaxPayloadBytes is the payload limit when Config.MaxPayloadBytes is zero: 8 MiB.
	DefaultMaxPayloadBytes = 8 << 20
)

// Config configures a Decoder and the row mapping.
type Config struct {
	// Table is the outbox table, "schema.table" or "table" in public (split at the first dot, names as
	// PostgreSQL stores them, so unquoted names are lower case). Default DefaultTable.
	Table string
	// MaxPayloadBytes is the largest payload accepted; a bigger one is quarantined.
	// Default DefaultMaxPayloadBytes; negative is invalid.
	MaxPayloadBytes int
	// Check, when set, validates each mapped event further (for example against AMQP limits). A non-nil
	// error quarantines the row with the error's text as the reason. It runs on the decoding goroutine.
	Check func(ev cdc.Event) error
}

// Validate reports the first invalid field of c, with the defaults applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, _, ok := splitTable(c.Table); !ok {
		return fmt.Errorf("decode: table %q must be a table name, as schema.table or table", c.Table)
	}
	if c.MaxPayloadBytes < 0 {
		return errors.New("decode: max payload bytes must not be negative")
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
	return c
}

// splitTable splits "schema.table" at the first dot (a name without a dot is in public); both parts must be
// non-empty.
func splitTable(t string) (schema, name string, ok bool) {
	schema, name, ok = strings.Cut(t, ".")
	if !ok {
		schema, name = "public", t // an unqualified name is in public, as migrations and the checks take it
	}
	return schema, name, schema != "" && name != ""
}
