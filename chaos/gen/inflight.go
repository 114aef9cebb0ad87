package gen

import (
	"math/rand/v2"
	"sort"
	"time"
)

// CmdResetInFlight is an operator's reset while transactions that wrote events are open or prepared
// (issue 35): router 0 (and its standby) stopped gracefully, as CmdResetIdle does, one open and one
// PREPAREd transaction each insert outbox rows (and, with Setup.Emit, emit an event), then reset without
// --force. N says when they commit: InFlightHeld after the reset, whose --wait (Dur) is short, so it must
// refuse naming them; InFlightCommitted while the reset waits for them (Dur, long), so it must refuse for
// the unpublished events they committed. Then the routers start again and must publish every one.
const CmdResetInFlight Kind = "reset-in-flight"

// The two orders of CmdResetInFlight (its Step.N).
const (
	InFlightHeld      = 0
	InFlightCommitted = 1
)

// addResetInFlight gives a third of the seeds one CmdResetInFlight in the first three fifths: held across
// a reset with a --wait of 0.5–1.5 s, or (half of the seeds without shards) committed while a reset with a
// --wait of 15 s waits for them. With shards it is always held: the rows the transactions commit may fall
// to the other shard's slot, which the reset of slot 0 does not count. It draws from a generator of its
// own and comes after every other, so that no other choice of a plan changes; under its stream (0x1f13)
// the CI seed 107 draws it (held, with emitted events) and 2026 and 2160 do not.
func addResetInFlight(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x1f13))
	if r.IntN(3) != 0 {
		return
	}
	f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 3 / 5))), Kind: CmdResetInFlight,
		N: InFlightHeld, Dur: time.Duration(500+r.IntN(1000)) * time.Millisecond}
	if p.Setup.Shards == 0 && r.IntN(2) == 0 {
		f.N, f.Dur = InFlightCommitted, 15*time.Second
	}
	p.Faults = append(p.Faults, f)
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}
