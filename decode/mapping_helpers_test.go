package decode

import (
	"github.com/cdc-router/cdc-router/decode/internal/pgtext"
	"github.com/cdc-router/cdc-router/decode/mapping"
)

// parseMapping is mapping.ParseMapping, for the tests that decode a mapped outbox.
func parseMapping(text string) (*Mapping, error) { return mapping.ParseMapping(text) }

// Type OIDs the mapped tests' columns have besides the native ones.
const (
	oidBool      = pgtext.OIDBool
	oidBytea     = pgtext.OIDBytea
	oidFloat8    = pgtext.OIDFloat8
	oidTimestamp = pgtext.OIDTimestamp
)
