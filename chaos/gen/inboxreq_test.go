package gen

import "testing"

// TestInboxRequestsDrawn: a third of the seeds or so draw gen.CmdInboxRequests, each way among them, never
// with a column drift, and none of the CI seeds (their plans and CI's time stay what they were).
func TestInboxRequestsDrawn(t *testing.T) {
	ways := map[int]int{}
	drawn := 0
	for seed := int64(1); seed <= 300; seed++ {
		p := Generate(seed, Options{})
		for _, f := range p.Faults {
			if f.Kind != CmdInboxRequests {
				continue
			}
			drawn++
			ways[f.N]++
			if p.Has(FaultDrift) {
				t.Errorf("seed %d draws %s with a column drift", seed, f.Kind)
			}
			if f.At >= p.Setup.Duration*2/5 {
				t.Errorf("seed %d: %s at %v, after the first two fifths", seed, f.Kind, f.At)
			}
		}
	}
	if drawn < 60 || drawn > 130 {
		t.Errorf("%d of 300 seeds draw %s, want about a third of those without a drift", drawn, CmdInboxRequests)
	}
	for n := range InboxRequestWays {
		if ways[n] == 0 {
			t.Errorf("no seed of 300 draws the way %s", InboxRequestWays[n])
		}
	}
	for _, seed := range []int64{107, 5500, 5759, 19940} {
		if Generate(seed, Options{}).Has(CmdInboxRequests) {
			t.Errorf("CI seed %d draws %s", seed, CmdInboxRequests)
		}
	}
}
