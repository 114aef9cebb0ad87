package check

import (
	"fmt"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// checkAccessRefusals holds the routers to what docs/operations.md promises when RabbitMQ refuses their
// user (FaultPermissions: write or configure revoked, then restored): each line a router logs naming the
// 403 ACCESS_REFUSED is an ERROR that names the fix (rabbitmqctl set_permissions), and a router that
// logged one answers /readyz with 503 (or not at all) from then until the permissions were restored. A
// stall it causes is excused only inside its window (no-silent-stall's excuse, stallExcuse) and ends
// within the bound after the restore (broker-outage-bounded).
func checkAccessRefusals(h *History, l Limits) []Violation {
	var vs []Violation
	for _, e := range h.Events {
		if e.Kind != gen.FaultPermissions {
			continue
		}
		refusedAt := map[int]time.Time{}
		for _, ln := range h.Logs {
			// Log lines only (Level set): a process's last words on exit (`cdc-router run: …`) repeat the
			// ERROR line before them.
			if ln.Router < 0 || ln.Level == "" || ln.At.Before(e.From) || ln.At.After(e.To.Add(l.Stall)) || !strings.Contains(ln.Text, "ACCESS_REFUSED") {
				continue
			}
			if ln.Level != "ERROR" || !strings.Contains(ln.Text, "set_permissions") {
				vs = append(vs, Violation{Detail: fmt.Sprintf("router %d at +%.2fs named the refusal without the fix, as %s: %s",
					ln.Router, ln.At.Sub(h.Start).Seconds(), ln.Level, Trim(ln.Text, 300)), At: ln.At})
			}
			if t, ok := refusedAt[ln.Router]; !ok || ln.At.Before(t) {
				refusedAt[ln.Router] = ln.At
			}
		}
		for _, s := range h.Ready {
			t, ok := refusedAt[s.Router]
			// A second after the line: /readyz reads the state the line reports.
			if ok && s.Code == 200 && s.At.After(t.Add(time.Second)) && s.At.Before(e.To) {
				vs = append(vs, Violation{Detail: fmt.Sprintf("router %d answered /readyz 200 at +%.2fs while its user could not publish "+
					"(refused at +%.2fs, restored at +%.2fs)", s.Router, s.At.Sub(h.Start).Seconds(), t.Sub(h.Start).Seconds(),
					e.To.Sub(h.Start).Seconds()), At: s.At})
				break
			}
		}
	}
	return compress(vs, 5)
}
