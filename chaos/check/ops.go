package check

import (
	"fmt"
	"strings"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

func checkExits(h *History, l Limits) []Violation {
	n := map[int]int{}
	var vs []Violation
	for _, e := range h.Events {
		if e.Kind != KindRouterExit || gapRefusal(e.Note) || refusalExit(h, e, l) || driftExit(h, e, l) {
			continue
		}
		n[e.Router]++
		if n[e.Router] == l.RouterExits+1 {
			vs = append(vs, Violation{Detail: fmt.Sprintf("router %d exited on its own %d times (a restart loop); the last: %s", e.Router, n[e.Router], e.Note), At: e.From})
		}
	}
	return vs
}

// gapRefusal reports whether an exit was the refusal of a publication gap, which names its backfill: the
// router is held behind a refusal that names the fix (the operator runs it, operator.go), not in a loop.
func gapRefusal(note string) bool { return strings.Contains(note, "may have been out of publication") }

// checkReset: a reset without --force run while its router was ready (streaming) must refuse; the runner
// records the outcome as "exit <code>: <last line>".
func checkReset(h *History, _ Limits) []Violation {
	var vs []Violation
	for _, e := range h.Events {
		if e.Kind == gen.CmdResetLive && strings.HasPrefix(e.Note, "exit 0") {
			vs = append(vs, Violation{Detail: fmt.Sprintf("reset without --force at +%.2fs succeeded while router %d was ready: %s",
				e.From.Sub(h.Start).Seconds(), e.Router, e.Note), At: e.From})
		}
	}
	return vs
}

func checkLogs(h *History, l Limits) []Violation {
	var vs []Violation
	for _, ln := range h.Logs {
		if l.PayloadToken != "" && strings.Contains(ln.Text, l.PayloadToken) {
			vs = append(vs, Violation{Detail: "a log line carries a payload: " + Trim(ln.Text, 200), At: ln.At})
		}
		if strings.Contains(ln.Text, "WARNING: DATA RACE") {
			vs = append(vs, Violation{Detail: "a router reported a data race", At: ln.At})
		}
	}
	return compress(vs, 3)
}

// Trim shortens s to n bytes and marks the cut.
func Trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
