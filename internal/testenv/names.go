package testenv

import (
	"fmt"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

var seq atomic.Int64

var nonName = regexp.MustCompile(`[^a-z0-9_]+`)

// Name is a name unique to this test and this run, made of lower-case letters, digits and underscores, so
// it is valid as a database, slot, exchange or queue name.
func Name(t testing.TB) string {
	base := nonName.ReplaceAllString(strings.ToLower(t.Name()), "_")
	if len(base) > 30 {
		base = base[:30]
	}
	return fmt.Sprintf("t_%s_%d_%d", strings.Trim(base, "_"), time.Now().UnixNano()%1e6, seq.Add(1))
}
