package gen

import (
	"math/rand/v2"
	"sort"
	"time"
)

// FaultPause stops the active router process of a slot with a standby (Setup.Standby) by SIGSTOP for Dur,
// then continues it by SIGCONT (issue 36, findings 1 and 2; ADR 0010): a wedged process, a debugger, a
// stalled virtual machine. Its kernel keeps its sockets open and answers TCP meanwhile. With N=PauseEnded
// the harness also ends the paused process's walsender (pg_terminate_backend of the slot's active_pid, the
// session that holds the slot's lock) a second into the pause at most, as a dead host's keepalives or an
// operator would. The routers of such a plan run with --lease PauseLease.
const FaultPause Kind = "router-pause"

// The two forms of FaultPause (its Step.N).
const (
	PauseOnly  = 0 // the process is stopped, its sessions left to PostgreSQL's wal_sender_timeout (--lease)
	PauseEnded = 1 // and its walsender is terminated during the pause
)

// PauseLease is the routers' --lease on a plan with FaultPause, as in e2e's TestPausedRouter: PostgreSQL ends
// a silent router's walsender, and with it the slot's lock, this long after its last word.
const PauseLease = 4 * time.Second

// pauseClass draws a pause's length: shorter than the fence's bound on a hold-up (1 s with PauseLease,
// replication.Fence's jump), between that and the lease, or longer than the lease.
func pauseClass(r *rand.Rand) time.Duration {
	switch r.IntN(3) {
	case 0:
		return time.Duration(200+r.IntN(700)) * time.Millisecond
	case 1:
		return time.Duration(1200+r.IntN(2600)) * time.Millisecond
	}
	return PauseLease + time.Duration(1000+r.IntN(3000))*time.Millisecond
}

// addPause gives half of the seeds with a standby one or two FaultPause in the first three fifths, each of a
// length drawn from the three classes (pauseClass), a third of them with the walsender terminated. It
// draws from a generator of its own and comes after every other, so that no other choice of a plan
// changes; only standby seeds draw it, and the CI seeds draw no standby (TestCISeedsDrawNoStandby).
func addPause(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x9a05))
	if !p.Setup.Standby || r.IntN(2) != 0 {
		return
	}
	for range 1 + r.IntN(2) {
		f := Step{At: time.Duration(r.Int64N(int64(p.Setup.Duration * 3 / 5))), Kind: FaultPause, Dur: pauseClass(r)}
		if p.Setup.Shards > 0 {
			f.Router = r.IntN(p.Setup.Shards)
		}
		if r.IntN(3) == 0 {
			f.N = PauseEnded
		}
		p.Faults = append(p.Faults, f)
	}
	sort.SliceStable(p.Faults, func(i, j int) bool { return p.Faults[i].At < p.Faults[j].At })
}
