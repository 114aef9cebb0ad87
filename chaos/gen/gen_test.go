package gen

import (
	"reflect"
	"testing"
	"time"
)

func TestGenerateIsAFunctionOfTheSeed(t *testing.T) {
	a, b := Generate(42, Options{}), Generate(42, Options{})
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of seed 42 differ")
	}
	if reflect.DeepEqual(a, Generate(43, Options{})) {
		t.Fatal("seeds 42 and 43 gave the same plan")
	}
}

func kindsIn(o Options) map[Kind]bool {
	seen := map[Kind]bool{}
	for seed := int64(1); seed <= 300; seed++ {
		p := Generate(seed, o)
		for _, f := range p.Faults {
			seen[f.Kind] = true
		}
		for _, w := range p.Ops {
			for _, op := range w {
				seen[op.Kind] = true
			}
		}
		if len(p.Setup.Tables) > 1 && (p.Setup.SnapshotRows > 0 || !p.WaitForStreaming) {
			seen["multitable-snapshot"] = true
		}
		for _, f := range p.Faults {
			if f.Kind == FaultMemAlarm && f.Dur > 12*time.Second {
				seen[LongMemAlarm] = true
			}
		}
		if p.DeleteDuringSnapshot {
			seen["snapshot-resume-deleted"] = true
		}
	}
	return seen
}

func TestKnownBrokenKindsOnlyWhenAsked(t *testing.T) {
	seen := kindsIn(Options{})
	for _, k := range []Kind{FaultPubGap, OpHuge, CmdResetIdle, FaultPGHole, OpEmit, OpForged, FaultBrokerRestart, FaultMemAlarm, FaultPartAttach, FaultPartDetach, FaultPartDrop, CmdReplay, FaultColumn, FaultExchangeDelete, FaultExchangeUnbind, FaultPGCutActive, CmdResetInFlight, "multitable-snapshot", "snapshot-resume-deleted"} {
		if !seen[k] {
			t.Errorf("%s is not in the default mix", k)
		}
	}
	for k := range knownBroken {
		if seen[k] {
			t.Errorf("%s generated without -chaos.known-broken", k)
		}
	}
	defer delete(knownBroken, FaultPubGap)
	knownBroken[FaultPubGap] = "gated for this test"
	if kindsIn(Options{})[FaultPubGap] {
		t.Errorf("%s generated while gated", FaultPubGap)
	}
	if !kindsIn(Options{KnownBroken: map[Kind]bool{"all": true}})[FaultPubGap] {
		t.Errorf("%s never generated with -chaos.known-broken=all", FaultPubGap)
	}
}

// Emitted events never come with shards, which refuse --message-prefix.
func TestEmitNeverWithShards(t *testing.T) {
	n := 0
	for seed := int64(1); seed <= 300; seed++ {
		p := Generate(seed, Options{})
		if p.Setup.Emit && p.Setup.Shards > 0 {
			t.Fatalf("seed %d: emit with %d shards", seed, p.Setup.Shards)
		}
		if p.Setup.Emit {
			n++
		}
	}
	if n < 60 {
		t.Fatalf("only %d of 300 seeds emit events", n)
	}
}

// The broker faults act on the whole broker (or on a policy and a user the harness makes there): they come
// only with the harness's own node, and each of them comes with some of its seeds.
func TestBrokerFaultsOnlyOnTheOwnNode(t *testing.T) {
	seen := map[Kind]int{}
	for seed := int64(1); seed <= 300; seed++ {
		p := Generate(seed, Options{})
		for _, f := range p.Faults {
			switch f.Kind {
			case FaultBrokerRestart, FaultMemAlarm, FaultQueuePolicy, FaultBrokerKill, FaultPermissions:
				if !p.Setup.OwnBroker {
					t.Fatalf("seed %d: %s on the shared broker", seed, f.Kind)
				}
				seen[f.Kind]++
			}
		}
	}
	for _, k := range []Kind{FaultBrokerRestart, FaultMemAlarm, FaultQueuePolicy, FaultBrokerKill, FaultPermissions} {
		if seen[k] < 20 {
			t.Errorf("only %d of 300 seeds have %s", seen[k], k)
		}
	}
}

// TestAggregateWindowOnlyWhereTheBrokerRefusesNothing: an --aggregate-window over 1 trades order under a
// refusal, so it is drawn only for setups without the full queue or the topic's exchange taken away; and
// it is drawn for some.
func TestAggregateWindowOnlyWhereTheBrokerRefusesNothing(t *testing.T) {
	n := 0
	for seed := int64(1); seed <= 300; seed++ {
		s := Generate(seed, Options{}).Setup
		if s.AggregateWindow <= 1 {
			continue
		}
		n++
		if p := Generate(seed, Options{}); s.FullQueue || s.ExchangeByTopic || p.Has(FaultQueuePolicy) || p.Has(OpTooBig) {
			t.Fatalf("seed %d: aggregate window %d with a broker that refuses events (%s)", seed, s.AggregateWindow, s)
		}
		if s.AggregateWindow > s.Window {
			t.Fatalf("seed %d: aggregate window %d over the window %d, which run refuses", seed, s.AggregateWindow, s.Window)
		}
	}
	if n < 30 {
		t.Fatalf("only %d of 300 seeds pipeline an aggregate", n)
	}
}

// The hot standby runs beside every router, sharded ones too (each takeover fault names a shard of the
// setup), and only its seeds cut the active router alone.
func TestStandbyBesideEveryRouter(t *testing.T) {
	n, sharded := 0, 0
	shardsHit := map[int]bool{}
	for seed := int64(1); seed <= 300; seed++ {
		p := Generate(seed, Options{})
		for _, f := range p.Faults {
			if f.Kind == FaultPGCutActive && !p.Setup.Standby {
				t.Fatalf("seed %d: %s without a standby", seed, f.Kind)
			}
			if (f.Kind == FaultPGCutActive || f.Kind == FaultKill || f.Kind == FaultTerm) && f.Router >= p.Setup.Routers() {
				t.Fatalf("seed %d: %s of router %d, of %d", seed, f.Kind, f.Router, p.Setup.Routers())
			}
			if p.Setup.Standby && p.Setup.Shards > 0 && f.Kind == FaultPGCutActive {
				shardsHit[f.Router] = true
			}
		}
		if p.Setup.Standby {
			n++
			if p.Setup.Shards > 0 {
				sharded++
			}
		}
	}
	if n < 80 || sharded < 20 || !shardsHit[0] || !shardsHit[1] {
		t.Fatalf("of 300 seeds %d run a standby, %d of them with shards, whose active-router cuts hit shards %v", n, sharded, shardsHit)
	}
}

// The CI seeds (ciSeeds in chaos/chaos_test.go) draw no standby: the standby's generator came last and left
// their plans as they were.
func TestCISeedsDrawNoStandby(t *testing.T) {
	for _, seed := range []int64{107, 2026, 2160} {
		p := Generate(seed, Options{})
		if p.Setup.Standby {
			t.Errorf("seed %d draws a standby", seed)
		}
		for _, f := range p.Faults {
			if f.Kind == FaultPGCutActive {
				t.Errorf("seed %d draws %s", seed, f.Kind)
			}
		}
	}
}

// Partitioned seeds draw publication gaps, with partitions attached during and after them; no partition is
// detached or dropped from a gap's start on (it would take the gap's rows before their backfill reads them).
func TestPublicationGapsOnPartitionedSeeds(t *testing.T) {
	gaps, attachedAfter := 0, 0
	for seed := int64(1); seed <= 1000; seed++ {
		p := Generate(seed, Options{})
		if !p.Setup.Partitioned {
			continue
		}
		var gap time.Duration = -1
		for _, f := range p.Faults {
			switch {
			case f.Kind == FaultPubGap && gap < 0:
				gap = f.At
				gaps++
				if p.PublicationCheck == 0 {
					t.Errorf("seed %d: a publication gap with the default 30 s publication check", seed)
				}
			case gap >= 0 && (f.Kind == FaultPartDetach || f.Kind == FaultPartDrop):
				t.Errorf("seed %d: %s at %v after the publication gap at %v", seed, f.Kind, f.At, gap)
			case gap >= 0 && f.Kind == FaultPartAttach:
				attachedAfter++
			}
		}
	}
	if gaps < 10 || attachedAfter < 10 {
		t.Errorf("seeds 1-1000: %d partitioned seeds with a publication gap, %d partitions attached after one; want 10 or more of each", gaps, attachedAfter)
	}
	t.Logf("%d partitioned seeds with a publication gap, %d partitions attached after one", gaps, attachedAfter)
}

// Rows over the broker's max_message_size are written only on the harness's own node, whose rabbitmq.conf
// sets it, and on most of its seeds.
func TestTooBigOnlyOnTheOwnNode(t *testing.T) {
	own, with := 0, 0
	for seed := int64(1); seed <= 1000; seed++ {
		p := Generate(seed, Options{})
		if p.Has(OpTooBig) && !p.Setup.OwnBroker {
			t.Fatalf("seed %d: a row over max_message_size on the shared broker (%s)", seed, p.Setup)
		}
		if p.Setup.OwnBroker {
			own++
			if p.Has(OpTooBig) {
				with++
			}
		}
	}
	if with < own/2 {
		t.Errorf("seeds 1-1000: %d of %d seeds on the own node write a row over max_message_size; want most", with, own)
	}
	t.Logf("%d of %d seeds on the own node write rows over max_message_size", with, own)
}

// A reset with transactions in flight is drawn on about a third of the seeds, in the first three fifths,
// in both orders (committed after the reset with a short --wait, or while a long --wait runs), the second
// never with shards (its rows may fall to the other shard's slot); CI seed 107 draws the first, with
// emitted events, and 2026 and 2160 draw none.
func TestResetInFlightDrawn(t *testing.T) {
	n := map[int]int{}
	for seed := int64(1); seed <= 300; seed++ {
		p := Generate(seed, Options{})
		for _, f := range p.Faults {
			if f.Kind != CmdResetInFlight {
				continue
			}
			n[f.N]++
			if f.At >= p.Setup.Duration*3/5 {
				t.Errorf("seed %d: %s at %v, past three fifths of %v", seed, f.Kind, f.At, p.Setup.Duration)
			}
			switch {
			case f.N == InFlightHeld && (f.Dur < 500*time.Millisecond || f.Dur > 1500*time.Millisecond):
				t.Errorf("seed %d: held across a reset with --wait %v", seed, f.Dur)
			case f.N == InFlightCommitted && (p.Setup.Shards > 0 || f.Dur < 10*time.Second):
				t.Errorf("seed %d: committed during a --wait of %v with %d shards", seed, f.Dur, p.Setup.Shards)
			}
		}
	}
	if n[InFlightHeld] < 30 || n[InFlightCommitted] < 20 {
		t.Errorf("seeds 1-300: %d held and %d committed during the wait; want 30 and 20 or more", n[InFlightHeld], n[InFlightCommitted])
	}
	for seed, want := range map[int64]int{107: 1, 2026: 0, 2160: 0} {
		p, got := Generate(seed, Options{}), 0
		for _, f := range p.Faults {
			if f.Kind == CmdResetInFlight {
				got++
				if f.N != InFlightHeld || !p.Setup.Emit {
					t.Errorf("CI seed %d: %s, with emit=%v; want held with emitted events", seed, f, p.Setup.Emit)
				}
			}
		}
		if got != want {
			t.Errorf("CI seed %d draws %d resets with transactions in flight, want %d", seed, got, want)
		}
	}
}
