package check

import (
	"fmt"
	"strings"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// KindRetireAfter is `migrate --emit-function --retire-emit-keys --wait 30s` run by a gen.CmdRetireInFlight
// once its held transactions committed: it must retire (exit 0, "retired: …").
const KindRetireAfter gen.Kind = "retire-emit-keys"

// KindLateEmit is a gen.CmdRetireInFlight's emit after the retirement in a transaction that began before the
// rotation: Note "committed", or "failed: …" when emit (or the commit) failed.
const KindLateEmit gen.Kind = "retire-late-emit"

// checkRetireInFlight (issue 35, finding 2): `migrate --retire-emit-keys` run while transactions that
// emitted with the old key are open or prepared must refuse, exit 1, naming each (Event.IDs, as it names
// them: "pid N (" of the open one, "prepared transaction 'G'" of the prepared one); one that waited while
// they committed must retire only after (the runner sets IDs when it ended before their commit); once they
// committed it must retire; and a transaction that began before the rotation must still be able to emit
// after the retirement. The events themselves are invariant 1's: published, none quarantined as forged.
// A note "skipped: …" is a run whose setup the runner could not make (a router that did not reload its
// keys, a transaction a PostgreSQL restart ended).
func checkRetireInFlight(h *History, _ Limits) []Violation {
	var vs []Violation
	for _, e := range h.Events {
		when := fmt.Sprintf("key retirement at +%.2fs", e.From.Sub(h.Start).Seconds())
		switch {
		case e.Kind == gen.CmdRetireInFlight && strings.HasPrefix(e.Note, "skipped"):
		case e.Kind == gen.CmdRetireInFlight && len(e.IDs) > 0 && strings.HasPrefix(e.Note, "exit 0"):
			vs = append(vs, Violation{Detail: fmt.Sprintf("%s retired the old keys with %s in flight: %s", when,
				strings.Join(e.IDs, " and "), Trim(e.Note, 300)), At: e.From})
		case e.Kind == gen.CmdRetireInFlight && len(e.IDs) > 0 && lostServer(e.Note):
		case e.Kind == gen.CmdRetireInFlight && len(e.IDs) > 0:
			for _, id := range e.IDs {
				if !strings.HasPrefix(e.Note, "exit 1:") || !strings.Contains(e.Note, id) {
					vs = append(vs, Violation{Detail: fmt.Sprintf("%s with transactions in flight did not refuse naming %s: %s", when, id,
						Trim(e.Note, 600)), At: e.From})
				}
			}
		case (e.Kind == gen.CmdRetireInFlight || e.Kind == KindRetireAfter) && !lostServer(e.Note) &&
			(!strings.HasPrefix(e.Note, "exit 0") || !strings.Contains(e.Note, "retired:")):
			vs = append(vs, Violation{Detail: fmt.Sprintf("%s once its transactions in flight had committed did not retire: %s", when,
				Trim(e.Note, 600)), At: e.From})
		case e.Kind == KindLateEmit && e.Note != "committed" && !lostServer(e.Note):
			vs = append(vs, Violation{Detail: fmt.Sprintf("a transaction begun before the emit key's rotation could not emit after its "+
				"retirement (at +%.2fs): %s", e.From.Sub(h.Start).Seconds(), Trim(e.Note, 300)), At: e.From})
		}
	}
	return vs
}

// lostServer reports whether a command's note says it lost PostgreSQL (a restart or a crash of the run's
// faults), not that it decided anything.
func lostServer(note string) bool {
	for _, s := range []string{"connection refused", "terminating connection", "the database system is", "unexpected EOF",
		"conn closed", "connection reset"} {
		if strings.Contains(note, s) {
			return true
		}
	}
	return false
}
