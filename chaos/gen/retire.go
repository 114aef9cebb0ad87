package gen

import (
	"math/rand/v2"
	"sort"
	"time"
)

// CmdRetireInFlight is an operator's key rotation and retirement while transactions that emitted events
// are open or prepared (issue 35, finding 2): with the routers streaming, one open and one PREPAREd
// transaction each insert outbox rows and emit an event (signed with the current key), a third transaction
// begins and reads only (no transaction id, so it holds no retirement back); then `migrate --emit-function
// --rotate-emit-key`, and once every router holds the new key the test-only shortcut of the e2e tests
// (its not_before moved to now; the real delay is 2 min). N says how the retirement meets them:
// RetireHeld runs `--retire-emit-keys` at once, which must refuse naming both, then commits them and
// retires with --wait; RetireCommitted runs `--retire-emit-keys --wait 20s`, commits them while it waits,
// and it must retire only after. Then the third transaction emits and commits, and one more event is
// emitted: every event must be published, none called forged, and no emit may fail (check's
// retire-refuses-transactions-in-flight). Only on seeds with emitted events (Setup.Emit).
const CmdRetireInFlight Kind = "retire-in-flight"

// The two orders of CmdRetireInFlight (its Step.N).
const (
	RetireHeld      = 0
	RetireCommitted = 1
)

// addRetireInFlight gives half of the seeds with emitted events and without a CmdResetInFlight (whose held
// transactions would hold the retirement back too) one CmdRetireInFlight in the first two fifths: it runs
// beside the other faults and takes 10–40 s (the routers reload their keys at their publication check
// interval, set to 2 s for these seeds). It draws from a generator of its own and comes after every
// other, so that no other choice of a plan changes.
func addRetireInFlight(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x4e71))
	if !p.Setup.Emit || p.Has(CmdResetInFlight) || r.IntN(2) != 0 {
		return
	}
	f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 2 / 5))), Kind: CmdRetireInFlight, N: r.IntN(2)}
	p.Faults = append(p.Faults, f)
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}
