package check

import (
	"fmt"
	"strings"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// checkResetInFlight: a reset without --force run while transactions that wrote events were open or
// prepared (gen.CmdResetInFlight) must refuse, exit 1. When they were still in flight at its end, its
// refusal names each of them (Event.IDs, as reset names them: "(xid N," of the open one, "gid 'G'" of the
// prepared one); when they committed while it waited, it refuses for the unpublished events they committed
// (or for other transactions still in flight). The runner records the outcome as "exit <code>: <the
// output's last line>", or "skipped: …" when it could not hold the transactions.
func checkResetInFlight(h *History, _ Limits) []Violation {
	var vs []Violation
	for _, e := range h.Events {
		if e.Kind != gen.CmdResetInFlight || strings.HasPrefix(e.Note, "skipped") {
			continue
		}
		when := fmt.Sprintf("reset at +%.2fs with transactions in flight", e.From.Sub(h.Start).Seconds())
		inFlight := strings.Contains(e.Note, "open or prepared")
		switch {
		case strings.HasPrefix(e.Note, "exit 0"):
			what := "its transactions committed during its wait, their events unpublished"
			if len(e.IDs) > 0 {
				what = "shown " + strings.Join(e.IDs, " and ") + " in flight"
			}
			vs = append(vs, Violation{Detail: fmt.Sprintf("%s succeeded, %s: %s", when, what, Trim(e.Note, 300)), At: e.From})
		case !strings.HasPrefix(e.Note, "exit 1:"):
			vs = append(vs, Violation{Detail: fmt.Sprintf("%s ended otherwise than by a refusal: %s", when, Trim(e.Note, 300)), At: e.From})
		case len(e.IDs) > 0:
			for _, id := range e.IDs {
				if !inFlight || !strings.Contains(e.Note, id) {
					vs = append(vs, Violation{Detail: fmt.Sprintf("%s refused without naming %s, still in flight: %s", when, id, Trim(e.Note, 600)), At: e.From})
				}
			}
		case !inFlight && !strings.Contains(e.Note, "still holds"):
			vs = append(vs, Violation{Detail: fmt.Sprintf("%s refused, but not for the unpublished events its transactions committed: %s", when, Trim(e.Note, 300)), At: e.From})
		}
	}
	return vs
}
