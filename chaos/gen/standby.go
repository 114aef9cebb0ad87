package gen

import (
	"math/rand/v2"
	"sort"
	"time"
)

// FaultPGCutActive closes the PostgreSQL connections of the active router alone (Setup.Standby): its
// session's advisory lock and its walsender end, and either the standby or the router itself, reconnecting,
// holds the slot next.
const FaultPGCutActive Kind = "pg-cut-active"

// addStandby gives half of the seeds a hot standby beside each router (Setup.Standby), one or two
// FaultPGCutActive and one router SIGKILL or SIGTERM in the first four fifths; their router SIGKILLs and
// SIGTERMs (these and genFaults') hit the active router of their slot, so that its standby takes over.
// With shards each of these picks its shard (since 3 December; the draws of the seeds without shards are
// what they were). It draws from a generator of its own and comes last, so that no other feature's choice
// changes. Its stream (0x57bd) is one of those under which the CI seeds (107, 2026, 2160) draw no
// standby, so that their plans stay what they were.
func addStandby(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x57bd))
	if r.IntN(2) != 0 {
		return
	}
	shard := func() int {
		if p.Setup.Shards > 0 {
			return r.IntN(p.Setup.Shards)
		}
		return 0
	}
	p.Setup.Standby = true
	for range 1 + r.IntN(2) {
		p.Faults = append(p.Faults, Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 4 / 5))), Kind: FaultPGCutActive, Router: shard()})
	}
	// And one takeover for certain, whatever genFaults drew.
	f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 4 / 5))), Kind: pick(r, FaultKill, FaultTerm)}
	if f.Kind == FaultKill {
		f.Dur = time.Duration(100+r.IntN(2000)) * time.Millisecond
	}
	f.Router = shard()
	p.Faults = append(p.Faults, f)
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}
