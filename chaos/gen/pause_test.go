package gen

import (
	"testing"
	"time"
)

// TestCISeedsDrawNoPauseNorHot: the CI seeds (chaos_test.go's ciSeeds) keep their plans: neither a pause nor a
// hot-aggregate transaction is drawn for them.
func TestCISeedsDrawNoPauseNorHot(t *testing.T) {
	for _, seed := range []int64{107, 5500, 5759, 19940} {
		p := Generate(seed, Options{})
		if p.Has(FaultPause) || p.Has(OpHot) {
			t.Errorf("CI seed %d draws a pause or a hot transaction:\n%s", seed, p.Describe())
		}
	}
}

// TestPauseOnlyWithAStandby: a pause is drawn only where a standby can take over, and its lengths fall in the
// three classes.
func TestPauseOnlyWithAStandby(t *testing.T) {
	classes := map[string]int{}
	for seed := int64(1); seed <= 400; seed++ {
		p := Generate(seed, Options{})
		for _, f := range p.Faults {
			if f.Kind != FaultPause {
				continue
			}
			if !p.Setup.Standby {
				t.Fatalf("seed %d: a pause without a standby", seed)
			}
			switch {
			case f.Dur < time.Second:
				classes["short"]++
			case f.Dur <= PauseLease:
				classes["under-lease"]++
			default:
				classes["past-lease"]++
			}
			if f.N == PauseEnded {
				classes["ended"]++
			}
		}
	}
	for _, c := range []string{"short", "under-lease", "past-lease", "ended"} {
		if classes[c] == 0 {
			t.Errorf("no pause of class %s in 400 seeds: %v", c, classes)
		}
	}
}

// TestHotCapsTheWindow: a plan with a hot transaction has --lanes × --window at most hotWindow (or the smallest
// window), three or four faults after it and no huge transaction.
func TestHotCapsTheWindow(t *testing.T) {
	n := 0
	for seed := int64(1); seed <= 400; seed++ {
		p := Generate(seed, Options{})
		if !p.Has(OpHot) {
			continue
		}
		n++
		s := p.Setup
		if s.Lanes*s.Window > hotWindow && s.Window > 8 || p.Has(OpHuge) || s.AggregateWindow > s.Window {
			t.Errorf("seed %d: %s", seed, s)
		}
	}
	if n == 0 {
		t.Fatal("no seed of 1..400 draws a hot transaction")
	}
}
