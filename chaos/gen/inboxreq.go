package gen

import (
	"math/rand/v2"
	"sort"
	"time"
)

// CmdInboxRequests is an operator's inbox request filed while no inbox runner runs, then a replay (issue 35,
// finding 3). The harness runs a consumer of package inbox in its own process (inbox/runner's Runner, the
// inbox tables made by `migrate --inbox`), reading its own queue bound to the kind's aggregates: a target
// aggregate whose version 2 is a poison row the routers quarantine, so that versions 3 and 4 park, and a
// control aggregate of four valid versions. With versions 3 and 4 parked the runner is stopped, the
// operator files `cdc-router inbox resolve --parked <v3>` as N says, fixes version 2's row and replays it
// from the quarantine, and the runner starts again:
//   - InboxLeftFiled: filed with --leave-filed; the runner that starts carries it out (version 2 then
//     arrives after its skip and must be recorded failed, reason skipped) or refuses it (version 2 came
//     first);
//   - InboxExpired: filed without --leave-filed: the command must exit 1 saying the request expired, and no
//     runner may ever carry it out;
//   - InboxCancelled: filed with --leave-filed, listed by `inbox requests` and withdrawn by `inbox cancel`:
//     never carried out;
//   - InboxArrivedFirst: filed with --leave-filed; a runner that takes no requests applies the replayed
//     version 2 (and with it 3 and 4) before a runner that does starts: the request's premise no longer
//     holds and it must be refused, changing nothing.
//
// check's inbox-requests-are-safe judges the projection against the rows.
const CmdInboxRequests Kind = "inbox-requests"

// The four ways of CmdInboxRequests (its Step.N).
const (
	InboxLeftFiled = iota
	InboxExpired
	InboxCancelled
	InboxArrivedFirst
)

// InboxRequestWays names the ways of CmdInboxRequests, by Step.N.
var InboxRequestWays = [...]string{"left-filed", "expired", "cancelled", "arrived-first"}

// addInboxRequests gives a third of the seeds without a column drift (whose headers retyped to text would
// quarantine the kind's valid rows too) one CmdInboxRequests in the first two fifths: it runs beside the
// other faults and takes 5–20 s. It draws from a generator of its own and comes after every other, so that
// no other choice of a plan changes; under its stream (0x1b10) none of the CI seeds (107, 5500, 5759,
// 19940) draws it, so that their plans and CI's time stay what they were.
func addInboxRequests(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x1b10))
	if r.IntN(3) != 0 || p.Has(FaultDrift) {
		return
	}
	f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 2 / 5))), Kind: CmdInboxRequests, N: r.IntN(len(InboxRequestWays))}
	p.Faults = append(p.Faults, f)
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}
