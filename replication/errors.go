package replication

import (
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/pgserver"
)

// Fatal is an error that retrying cannot fix (cdc.Fatal): Run returns it instead of restarting.
type Fatal = cdc.Fatal

// IsFatal reports whether err must stop the router instead of restarting the stream.
func IsFatal(err error) bool { return pgserver.IsFatal(err) }

// withinGrace shortens a restart wait before the first successful start so that it ends at the start-up
// grace at the latest: the last attempt is then made when the grace ends, and the router gives up about
// startupGrace after it began instead of up to a whole backoff later. After the grace, wait is unchanged.
func withinGrace(wait time.Duration, began time.Time, started bool) time.Duration {
	if left := startupGrace - time.Since(began); !started && left > 0 {
		return min(wait, left)
	}
	return wait
}
